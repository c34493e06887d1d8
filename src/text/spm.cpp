// SentencePiece-style BPE (tokenizer.ggml.model = "llama").
//
// The text (spaces already as-is) gets the U+2581 prefix when asked, every space becomes
// U+2581, and the text is cut into characters. Then, repeatedly, the adjacent pair whose
// concatenation is the vocabulary piece with the highest score is merged (ties: leftmost
// pair first) until no adjacent pair forms a piece. A final piece that is not in the
// vocabulary (a lone character) is written as its bytes' <0xNN> tokens.
#include <queue>

#include "text/utf8.h"
#include "text/vocab.h"

namespace power::text {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";

struct Symbol {
  uint32_t start;
  uint32_t len;  // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Candidate {
  float score;
  int32_t left;
  int32_t right;
  uint32_t left_len;
  uint32_t right_len;
};

// Best candidate on top: highest score, then leftmost.
struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  }
};

}  // namespace

namespace {

// Runs the merges over the characters of one segment, appending its tokens.
void encode_segment(const TokenizerImpl& v, std::string_view s, std::vector<Symbol>& symbols,
                    std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder>& queue,
                    std::vector<TokenId>& out) {
  // One symbol per character; a malformed byte is a symbol of its own (it can never merge,
  // since vocabulary pieces are well-formed, and ends up as its byte token).
  symbols.clear();
  for (size_t pos = 0; pos < s.size();) {
    size_t len = utf8_sequence_length(s, pos);
    if (len == 0) len = 1;
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(len), index - 1,
                       pos + len < s.size() ? index + 1 : -1});
    pos += len;
  }
  if (symbols.empty()) return;

  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const TokenId id = v.find_text_piece(s.substr(l.start, l.len + r.len));
    if (id == kNoToken) return;
    queue.push({v.tokens[id].score, left, right, l.len, r.len});
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    consider(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  }

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = symbols[c.left];
    Symbol& r = symbols[c.right];
    // Stale: one side has since been merged into something else.
    if (l.len != c.left_len || r.len != c.right_len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& sym = symbols[i];
    const std::string_view piece = s.substr(sym.start, sym.len);
    const TokenId id = v.find_text_piece(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      const TokenId b = v.byte_tokens[static_cast<uint8_t>(c)];
      if (b != kNoToken) {
        out.push_back(b);
      } else if (v.special.unk != kNoToken) {
        out.push_back(v.special.unk);
      }
    }
  }
}

}  // namespace

void spm_encode(const TokenizerImpl& v, std::string_view text, bool add_prefix,
                std::vector<TokenId>& out) {
  std::string s;
  s.reserve(text.size() + 3);
  if (add_prefix) s.append(kSpaceMark);
  for (char c : text) {
    if (c == ' ') {
      s.append(kSpaceMark);
    } else {
      s.push_back(c);
    }
  }

  std::vector<Symbol> symbols;
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  if (!v.spm_words_split_at_space) {
    encode_segment(v, s, symbols, queue, out);
    return;
  }
  // Every merged symbol is a vocabulary piece, and no piece of this vocabulary has U+2581
  // after another character; so no merge can join a character to a U+2581 that follows it.
  // Cutting there gives independent segments (words with their leading U+2581s), and merging
  // each one alone keeps the same order of merges inside it -- the same result as one run
  // over the whole text, without a heap as large as the text.
  const std::string_view all = s;
  size_t begin = 0;
  for (size_t pos = 1; pos < all.size(); ++pos) {
    if (all.compare(pos, kSpaceMark.size(), kSpaceMark) != 0) continue;
    if (pos >= kSpaceMark.size() &&
        all.compare(pos - kSpaceMark.size(), kSpaceMark.size(), kSpaceMark) == 0) {
      continue;  // inside a run of U+2581
    }
    encode_segment(v, all.substr(begin, pos - begin), symbols, queue, out);
    begin = pos;
  }
  encode_segment(v, all.substr(begin), symbols, queue, out);
}

}  // namespace power::text
