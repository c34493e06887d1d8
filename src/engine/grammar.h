// Grammar-constrained generation: a context-free grammar over bytes, a matcher that follows
// it as bytes arrive (a pushdown automaton kept as a set of stacks), and the token mask that
// tells the sampler which tokens may come next.
//
// Grammar: rules of alternatives; an alternative is a sequence of byte sets and rule
// references (bytes, not code points: UTF-8 is spelled out by the rules that need it, so a
// token that ends inside a character needs no special case). Built with GrammarBuilder;
// build() rejects undefined rules and left recursion (a rule reachable from itself without
// consuming a byte), so following the grammar always terminates.
// Matcher: the live parse is a set of stacks of positions in the grammar (the alternatives
// that are still possible); a byte advances every stack whose top admits it and drops the
// others. The input is complete when some stack is empty.
// Token mask: every token's bytes (TokenTrie, built once per vocabulary) are walked down a
// prefix trie together with the matcher, so shared prefixes are advanced once and a subtree
// is pruned at the first byte the grammar refuses. End-of-generation tokens are allowed
// exactly when the input so far is complete.
// Thread-safety: Grammar and TokenTrie are immutable and shared; a GrammarMatcher belongs to
// one sequence and one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace power::text {
class Tokenizer;
}

namespace power::grammar {

// A set of bytes, one bit each.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1u; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool operator==(const ByteSet&) const = default;
};

enum class SymKind : uint8_t { kEnd, kBytes, kRule };
struct Sym {
  SymKind kind = SymKind::kEnd;
  uint32_t arg = 0;  // kBytes: index into Grammar::byte_sets; kRule: the rule id
};

// An immutable compiled grammar. Alternatives are stored back to back in `syms`, each ended
// by a kEnd symbol; a rule is the list of its alternatives' start offsets.
struct Grammar {
  std::vector<ByteSet> byte_sets;
  std::vector<Sym> syms;
  std::vector<std::vector<uint32_t>> rule_alts;
  std::vector<std::string> rule_names;  // for errors and dumps
  uint32_t root = 0;

  // A GBNF-like listing, for debugging and tests.
  std::string to_string() const;
};

class GrammarBuilder {
 public:
  using Seq = std::vector<Sym>;

  // A new, empty rule; define it later with add_alt (rules may refer to each other freely).
  uint32_t declare(std::string name);
  void add_alt(uint32_t rule, Seq seq);
  // A rule whose alternatives are the given sequences.
  uint32_t rule(std::string name, std::vector<Seq> alts);

  Sym bytes(const ByteSet& set);
  Sym byte(uint8_t b);
  static Sym ref(uint32_t rule) { return {SymKind::kRule, rule}; }
  // The bytes of `text`, one symbol each, appended to `seq`.
  void append_literal(Seq& seq, std::string_view text);
  Seq literal(std::string_view text) {
    Seq s;
    append_literal(s, text);
    return s;
  }
  // `item` repeated between min and max times (max < 0: unbounded), as a rule.
  uint32_t repeat(std::string name, const Seq& item, int min, int max);

  size_t n_rules() const { return alts_.size(); }

  // invalid_argument for a rule with no alternatives or left recursion (naming the rule).
  Result<std::shared_ptr<const Grammar>> build(uint32_t root) const;

 private:
  std::vector<ByteSet> sets_;
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> alts_;
};

// The bytes of every token, in a prefix trie. Tokens with no bytes (control tokens) are
// left out; end-of-generation tokens are listed apart.
class TokenTrie {
 public:
  // pieces[i]: the bytes of token i ("" for none); eog: the end-of-generation token ids.
  TokenTrie(const std::vector<std::string>& pieces, std::vector<int32_t> eog);
  static std::shared_ptr<const TokenTrie> from_tokenizer(const text::Tokenizer& tok);

  struct Node {
    uint32_t first_child = 0;  // children are nodes [first_child, first_child + n_children)
    uint32_t n_children = 0;
    uint32_t first_token = 0;  // tokens ending here: token_ids_[first_token, +n_tokens)
    uint32_t n_tokens = 0;
    uint8_t byte = 0;  // the edge into this node
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  const std::vector<int32_t>& eog_tokens() const { return eog_; }
  const std::string& piece(int32_t token) const { return pieces_[static_cast<size_t>(token)]; }
  size_t n_vocab() const { return pieces_.size(); }

 private:
  std::vector<Node> nodes_;  // node 0 is the root; children of a node are contiguous
  std::vector<int32_t> token_ids_;
  std::vector<std::string> pieces_;
  std::vector<int32_t> eog_;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);
  ~GrammarMatcher();
  GrammarMatcher(const GrammarMatcher&);
  GrammarMatcher& operator=(const GrammarMatcher&);

  // Feeds bytes; false (and the state unchanged) when the grammar refuses them.
  bool accept_bytes(std::string_view bytes);
  // Feeds a token: its bytes, or nothing for an end-of-generation token when complete.
  bool accept_token(const TokenTrie& trie, int32_t token);
  // The input so far is a complete sentence of the grammar.
  bool is_complete() const;
  // Some byte may still follow.
  bool can_continue() const;
  // allowed[t] = 1 when token t may come next, else 0 (allowed.size() == trie.n_vocab()).
  void fill_token_mask(const TokenTrie& trie, std::span<uint8_t> allowed);

  const Grammar& grammar() const { return *grammar_; }

 private:
  struct Work;
  std::shared_ptr<const Grammar> grammar_;
  // The live stacks, bottom first; an empty stack means "complete".
  std::vector<std::vector<uint32_t>> stacks_;
  std::unique_ptr<Work> work_;  // scratch reused across calls
};

}  // namespace power::grammar
