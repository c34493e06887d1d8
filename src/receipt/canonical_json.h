// Canonical JSON (RFC 8785, "JCS"): the one byte form of a JSON value that receipts are hashed
// and signed over.
//
//   - no whitespace; object members sorted by their names compared as UTF-16 code units;
//   - strings: UTF-8 as is, except '"' and '\' (escaped as \" and \\), and the control
//     characters U+0000..U+001F: \b \f \n \r \t, the rest as \u00xx (lowercase hex);
//     '/' and non-ASCII characters are never escaped;
//   - numbers: a double is written as ECMAScript's Number.prototype.toString writes it (the
//     shortest digits that round-trip, plain notation for exponents -7 < e < 21, else
//     d.ddde+NN); -0 is 0; NaN and infinities are refused. An integer (nlohmann's integer
//     kinds) is written in decimal and must lie within +-2^53, where JCS's double reading
//     and the exact integer agree; bigger integers (64-bit seeds) go into receipts as strings;
//   - literals: true, false, null.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace power::receipt {

// The canonical form of `value`. kInvalidArgument for NaN/infinity, integers beyond 2^53 or
// strings that are not valid UTF-8.
Result<std::string> canonical_json(const nlohmann::json& value);

// The ECMAScript form of a finite double (exposed for tests).
std::string ecmascript_number(double value);

// Parses JSON text strictly: UTF-8, no trailing garbage, no duplicate member names, nesting
// at most 64 deep. kCorrupt with the reason.
Result<nlohmann::json> parse_json_strict(std::string_view text);

}  // namespace power::receipt
