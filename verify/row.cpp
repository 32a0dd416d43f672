#include "verify/row.hpp"

#include <limits>
#include <utility>

namespace dflash {

VerifyRow::VerifyRow(RowName name)
    : group(std::move(name.group)), case_name(std::move(name.case_name)), variant(std::move(name.variant)) {}

VerifyRow tolerance_row(RowName name, Measured m) {
  VerifyRow row(std::move(name));
  row.error = m.error;
  row.tolerance = m.tolerance;
  row.peak_bytes = m.peak_bytes;
  row.note = std::move(m.note);
  return row;
}

VerifyRow exact_row(RowName name, Mismatch m) {
  VerifyRow row(std::move(name));
  row.error = m.mismatch;
  row.tolerance = 0;
  row.peak_bytes = m.peak_bytes;
  row.note = std::move(m.note);
  return row;
}

VerifyRow skipped_row(RowName name, std::string reason) {
  VerifyRow row(std::move(name));
  row.skipped = true;
  row.note = std::move(reason);
  return row;
}

VerifyRow threw_row(RowName name, std::string what) {
  VerifyRow row(std::move(name));
  row.error = std::numeric_limits<double>::infinity();
  row.note = "threw: " + std::move(what);
  return row;
}

}  // namespace dflash
