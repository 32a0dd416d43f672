// Bad input gets an exception whose message names the argument and the offending value.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dflash {

class InputError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// "invalid <argument>: <problem>"
[[noreturn]] inline void throw_input_error(std::string_view argument, std::string_view problem) {
  std::string message = "invalid ";
  message.append(argument).append(": ").append(problem);
  throw InputError(message);
}

// Streams anything printable (including Boost.Multiprecision numbers) into a string.
template <class... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  out.precision(17);
  (out << ... << parts);
  return out.str();
}

}  // namespace dflash
