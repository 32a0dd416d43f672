// The scalar types the reference is instantiated with: double, and 50 significant decimal digits
// (Boost.Multiprecision, binary floating point) for checking double against near-exact maths.
#pragma once

#include <boost/multiprecision/cpp_bin_float.hpp>

namespace dflash {

using Mp50 = boost::multiprecision::cpp_bin_float_50;

template <class Real>
double to_double(const Real& x) {
  return static_cast<double>(x);
}

}  // namespace dflash
