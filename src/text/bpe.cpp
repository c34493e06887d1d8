// Byte-level BPE (tokenizer.ggml.model = "gpt2").
//
// The pre-tokenizer splits the text into words; each word's bytes become symbols (one per
// byte, each standing for its GPT-2 code point). Repeatedly the adjacent pair with the lowest
// merge rank is merged (ties: leftmost), until no adjacent pair has a merge. Each final symbol
// is a token; in a vocabulary lacking a symbol, its bytes' tokens are used instead.
#include <queue>

#include "text/unicode.h"
#include "text/utf8.h"
#include "text/vocab.h"

namespace power::text {
namespace {

struct Symbol {
  int32_t sym;  // interned symbol id (BpeMerges), -1 if it occurs in no merge and no token
  uint32_t start;
  uint32_t len;  // bytes of the word; 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  uint32_t left_len;
  uint32_t right_len;
  int32_t result;
};

// Best candidate on top: lowest rank, then leftmost.
struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.left > b.left;
  }
};

// Buffers reused across the words of one call (the queue is always empty between words).
struct Scratch {
  std::vector<Symbol> symbols;
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  std::string encoded;
};

void push_byte_tokens(const TokenizerImpl& v, std::string_view bytes, std::vector<TokenId>& out) {
  for (char c : bytes) {
    const TokenId id = v.byte_tokens[static_cast<uint8_t>(c)];
    if (id != kNoToken) {
      out.push_back(id);
    } else if (v.special.unk != kNoToken) {
      out.push_back(v.special.unk);
    }
  }
}

void encode_word(const TokenizerImpl& v, std::string_view word, Scratch& scratch,
                 std::vector<TokenId>& out) {
  const BpeMerges& m = v.merges;
  if (v.ignore_merges) {
    std::string& enc = scratch.encoded;
    enc.clear();
    for (char c : word) utf8_append(enc, byte_to_unicode(static_cast<uint8_t>(c)));
    if (TokenId id = v.find_text_piece(enc); id != kNoToken) {
      out.push_back(id);
      return;
    }
  }

  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.clear();
  const auto n = static_cast<int32_t>(word.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols.push_back({m.byte_symbol[static_cast<uint8_t>(word[i])], static_cast<uint32_t>(i), 1,
                       i - 1, i + 1 < n ? i + 1 : -1});
  }

  auto& queue = scratch.queue;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    if (l.sym < 0 || r.sym < 0) return;
    auto it = m.by_pair.find(BpeMerges::key(l.sym, r.sym));
    if (it == m.by_pair.end()) return;
    queue.push({it->second.rank, left, right, l.len, r.len, it->second.result});
  };
  for (int32_t i = 1; i < n; ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = symbols[c.left];
    Symbol& r = symbols[c.right];
    if (l.len != c.left_len || r.len != c.right_len) continue;  // stale
    l.len += r.len;
    l.sym = c.result;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }

  const auto n_tokens = static_cast<int32_t>(v.tokens.size());
  for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.sym >= 0 && s.sym < n_tokens) {
      out.push_back(s.sym);
    } else {
      push_byte_tokens(v, word.substr(s.start, s.len), out);
    }
  }
}

}  // namespace

void bpe_encode(const TokenizerImpl& v, std::string_view text, std::vector<TokenId>& out) {
  std::string sanitized;
  if (!utf8_is_valid(text)) {
    sanitized = utf8_sanitize(text);
    text = sanitized;
  }
  std::vector<size_t> offsets;
  const std::vector<uint32_t> cps = utf8_decode(text, &offsets);
  std::vector<CpRange> words;
  pre_tokenize(v.pre_kind, cps, words);
  Scratch scratch;
  for (const CpRange& w : words) {
    const size_t begin = offsets[w.begin];
    encode_word(v, text.substr(begin, offsets[w.end] - begin), scratch, out);
  }
}

}  // namespace power::text
