// Streamed tool calls: which part of a streamed chat reply is safe to send as content while
// tool calls are enabled, and what to send once the reply is complete.
//
// Tool calls are parsed from the finished reply by the template family's format
// (chat/tool_calls.h), so a stream cannot send a call before the reply ends. The filter sends
// text as content until something that may open a call appears, and holds everything from
// there on:
//   * forced calls (tool_choice "required" or a named function): the whole reply is held;
//   * a reply that begins (after whitespace) with "{" or "[" (Llama 3's bare JSON call,
//     Mistral's call array, the forced-call array) is held from its first character;
//   * one of the textual openers of chat/tool_calls.h (kOpeners) is held from where it starts;
//     a suffix that could still grow into an opener is held until it cannot.
// At the end, finish() is given the completion: with parsed calls, the content outside the
// calls that was not sent yet is returned (the call text itself never goes out as content);
// without calls, everything held is returned as content, so no text is lost.
// Thread-safety: one filter per stream, used from one thread.
#pragma once

#include <string>
#include <string_view>

#include "power/request.h"

namespace power::server {

class ToolStreamFilter {
 public:
  // Openers that may start a call, as the streamed (special tokens not rendered) text shows
  // them when the model's vocabulary spells them as ordinary text.
  static constexpr std::string_view kOpeners[] = {"<tool_call>",
                                                  "<function=",
                                                  "<|python_tag|>",
                                                  "[TOOL_CALLS]",
                                                  "functools[",
                                                  ">>>",
                                                  "<｜tool▁calls▁begin｜>",
                                                  "<|tool_calls_section_begin|>",
                                                  "<｜tool▁call▁begin｜>"};

  explicit ToolStreamFilter(bool forced) : holding_(forced) {}

  // Text that became final -> the part that may be sent as content now ("" while holding).
  std::string push(std::string_view text);
  // The reply ended: the content still to send (see above).
  std::string finish(const Completion& c);
  bool holding() const { return holding_; }

 private:
  bool holding_ = false;  // an opener was seen (or forced): hold to the end
  std::string sent_;      // content sent so far
  std::string held_;      // text not sent (a possible opener prefix, or everything once holding)
};

}  // namespace power::server
