// The CUDA benchmarks' JSON text as their readers take it. std::ostream writes a non-finite double
// as "nan", "-nan", "inf" or "-inf", which Python's json.load refuses, so the JSON of a run that
// went wrong (a NaN loss, a gate's infinite ratio where a bound is 0) would lose its summary
// (summarize.py, summarize_step.py, ci/gpu's merge) exactly when it matters. Outside strings, those
// words become Python's NaN, Infinity and -Infinity.
#pragma once

#include <cstring>
#include <string>

namespace dflash {

inline std::string python_json_numbers(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\' && i + 1 < text.size()) {  // an escape: both characters as they are
        out.append(text, i, 2);
        i += 2;
        continue;
      }
      if (c == '"') in_string = false;
      out += c;
      ++i;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      ++i;
      continue;
    }
    const bool negative = c == '-';
    const std::size_t at = negative ? i + 1 : i;
    if (text.compare(at, 3, "nan") == 0) {
      out += "NaN";
      i = at + 3;
      continue;
    }
    if (text.compare(at, 3, "inf") == 0) {
      out += negative ? "-Infinity" : "Infinity";
      i = at + 3;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

}  // namespace dflash
