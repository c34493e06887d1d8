// Errors inside the Jinja-subset interpreter.
//
// The lexer, parser and interpreter throw JinjaError internally (deep recursion makes threading
// a Status through every call noisy); Template::parse and Template::render catch it and return
// a Status, so no exception ever leaves the chat module. line/column are 1-based positions in
// the template source; 0 means "not yet known" and the interpreter fills in the position of
// the node it was evaluating.
#pragma once

#include <string>
#include <utility>

#include "base/status.h"

namespace power::chat::jinja {

struct JinjaError {
  StatusCode code = StatusCode::kInvalidArgument;
  std::string message;
  int line = 0;
  int column = 0;
};

[[noreturn]] inline void throw_error(std::string message,
                                     StatusCode code = StatusCode::kInvalidArgument) {
  throw JinjaError{code, std::move(message), 0, 0};
}

[[noreturn]] inline void throw_error_at(int line, int column, std::string message,
                                        StatusCode code = StatusCode::kInvalidArgument) {
  throw JinjaError{code, std::move(message), line, column};
}

}  // namespace power::chat::jinja
