// io/json_fields: the config file reader (read_json_file).
#include "io/json_fields.hpp"

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/errors.hpp"

namespace dflash {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Every way a config file's bytes can fail to be JSON is the file's InputError: a grammar error
// (parse_error), a number beyond a double's range (out_of_range 406, found by fuzz/config), and
// anything after the one value (two configs concatenated, a stray edit): read leniently, the first
// would be taken and the rest dropped without a word.
TEST(JsonFields, FileThatIsNotJsonIsAnErrorNamingTheFile) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "dflash-json-fields-test.json";
  for (const char* text : {"{ \"total_steps\": 1,", "{ \"learning_rate\": 1e999, \"total_steps\": 1 }",
                           "{ \"total_steps\": 1 }\n{ \"total_steps\": 2 }", "{ \"total_steps\": 1 } x"}) {
    std::ofstream(path) << text;
    EXPECT_THAT([&] { read_json_file(path); }, ::testing::ThrowsMessage<InputError>(
                                                   AllOf(HasSubstr("dflash-json-fields-test.json"), HasSubstr("JSON"))))
        << text;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace dflash
