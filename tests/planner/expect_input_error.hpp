// The planner's bad-input tests: `run` must throw InputError, and its message must contain every
// fragment (the field or flag, the offending value, what is wrong).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "io/errors.hpp"

namespace dflash {

template <class Run>
void expect_input_error(Run&& run, std::initializer_list<std::string_view> fragments) {
  try {
    run();
    ADD_FAILURE() << "accepted; expected an error containing '" << *fragments.begin() << "'";
  } catch (const InputError& e) {
    const std::string message = e.what();
    for (std::string_view f : fragments) EXPECT_NE(message.find(f), std::string::npos) << message << "\nmissing: " << f;
  }
}

}  // namespace dflash
