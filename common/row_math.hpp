// exp/log for any scalar the project computes in: float and double on host and device, and
// Boost.Multiprecision (host only, found by argument-dependent lookup).
#pragma once

#include <cmath>
#include <type_traits>

#include "common/hd.hpp"

namespace dflash {

DFLASH_HD inline float exp_of(float x) { return expf(x); }
DFLASH_HD inline double exp_of(double x) { return ::exp(x); }
DFLASH_HD inline float log_of(float x) { return logf(x); }
DFLASH_HD inline double log_of(double x) { return ::log(x); }

template <class Real>
requires(!std::is_floating_point_v<Real>) Real exp_of(const Real& x) {
  using std::exp;
  return exp(x);
}
template <class Real>
requires(!std::is_floating_point_v<Real>) Real log_of(const Real& x) {
  using std::log;
  return log(x);
}

}  // namespace dflash
