#include "engine/grammar.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <numeric>

#include "text/tokenizer.h"

namespace power::grammar {

// ---- GrammarBuilder ----

uint32_t GrammarBuilder::declare(std::string name) {
  names_.push_back(std::move(name));
  alts_.emplace_back();
  return static_cast<uint32_t>(alts_.size() - 1);
}

void GrammarBuilder::add_alt(uint32_t rule, Seq seq) {
  POWER_CHECK(rule < alts_.size());
  alts_[rule].push_back(std::move(seq));
}

uint32_t GrammarBuilder::rule(std::string name, std::vector<Seq> alts) {
  const uint32_t r = declare(std::move(name));
  for (Seq& s : alts) add_alt(r, std::move(s));
  return r;
}

Sym GrammarBuilder::bytes(const ByteSet& set) {
  for (size_t i = 0; i < sets_.size(); ++i) {
    if (sets_[i] == set) return {SymKind::kBytes, static_cast<uint32_t>(i)};
  }
  sets_.push_back(set);
  return {SymKind::kBytes, static_cast<uint32_t>(sets_.size() - 1)};
}

Sym GrammarBuilder::byte(uint8_t b) {
  ByteSet s;
  s.add(b);
  return bytes(s);
}

void GrammarBuilder::append_literal(Seq& seq, std::string_view text) {
  for (char c : text) seq.push_back(byte(static_cast<uint8_t>(c)));
}

uint32_t GrammarBuilder::repeat(std::string name, const Seq& item, int min, int max) {
  // item{min} followed by an optional tail: up to (max - min) more, or any number.
  Seq head;
  for (int i = 0; i < min; ++i) head.insert(head.end(), item.begin(), item.end());
  uint32_t tail;
  if (max < 0) {
    tail = declare(name + "-star");
    Seq more = item;
    more.push_back(ref(tail));
    add_alt(tail, {});
    add_alt(tail, std::move(more));
  } else {
    // opt_k ::= "" | item opt_{k-1}; opt_0 ::= "".
    tail = rule(name + "-opt0", {Seq{}});
    for (int k = 1; k <= max - min; ++k) {
      Seq more = item;
      more.push_back(ref(tail));
      tail = rule(name + "-opt" + std::to_string(k), {Seq{}, std::move(more)});
    }
  }
  head.push_back(ref(tail));
  return rule(std::move(name), {std::move(head)});
}

Result<std::shared_ptr<const Grammar>> GrammarBuilder::build(uint32_t root) const {
  const size_t n = alts_.size();
  if (root >= n) return Status(StatusCode::kInvalidArgument, "grammar root is not a rule");
  for (size_t r = 0; r < n; ++r) {
    if (alts_[r].empty()) {
      return Status(StatusCode::kInvalidArgument, "grammar rule has no alternatives")
          .with("rule", names_[r]);
    }
    for (const Seq& s : alts_[r]) {
      for (const Sym& y : s) {
        if (y.kind == SymKind::kRule && y.arg >= n) {
          return Status(StatusCode::kInvalidArgument, "grammar refers to an undefined rule")
              .with("rule", names_[r]);
        }
      }
    }
  }
  // Nullable rules (can match the empty string), by fixpoint.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& s : alts_[r]) {
        bool all = true;
        for (const Sym& y : s) {
          if (y.kind != SymKind::kRule || !nullable[y.arg]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Left recursion: a cycle among "may be entered before any byte is consumed" edges.
  std::vector<std::vector<uint32_t>> first(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Seq& s : alts_[r]) {
      for (const Sym& y : s) {
        if (y.kind != SymKind::kRule) break;
        first[r].push_back(y.arg);
        if (!nullable[y.arg]) break;
      }
    }
  }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the DFS path, 2 done
  std::vector<std::pair<uint32_t, size_t>> dfs;
  for (size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    dfs.emplace_back(static_cast<uint32_t>(start), 0);
    color[start] = 1;
    while (!dfs.empty()) {
      auto& [r, i] = dfs.back();
      if (i == first[r].size()) {
        color[r] = 2;
        dfs.pop_back();
        continue;
      }
      const uint32_t next = first[r][i++];
      if (color[next] == 1) {
        return Status(StatusCode::kInvalidArgument,
                      "grammar is left-recursive (a rule can reach itself without consuming "
                      "input; in a schema: a $ref cycle through anyOf/oneOf)")
            .with("rule", names_[next]);
      }
      if (color[next] == 0) {
        color[next] = 1;
        dfs.emplace_back(next, 0);
      }
    }
  }
  auto g = std::make_shared<Grammar>();
  g->byte_sets = sets_;
  g->rule_names = names_;
  g->root = root;
  g->rule_alts.resize(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Seq& s : alts_[r]) {
      g->rule_alts[r].push_back(static_cast<uint32_t>(g->syms.size()));
      g->syms.insert(g->syms.end(), s.begin(), s.end());
      g->syms.push_back(Sym{SymKind::kEnd, 0});
    }
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

namespace {

std::string byte_set_text(const ByteSet& s) {
  auto esc = [](int b) {
    if (b >= 0x21 && b < 0x7f && b != '\\' && b != ']' && b != '-' && b != '"') {
      return std::string(1, static_cast<char>(b));
    }
    static const char* hex = "0123456789ABCDEF";
    return std::string("\\x") + hex[b >> 4] + hex[b & 15];
  };
  int count = 0;
  for (int b = 0; b < 256; ++b) count += s.has(static_cast<uint8_t>(b));
  if (count == 1) {
    for (int b = 0; b < 256; ++b) {
      if (s.has(static_cast<uint8_t>(b))) return "\"" + esc(b) + "\"";
    }
  }
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!s.has(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.has(static_cast<uint8_t>(e + 1))) ++e;
    out += esc(b);
    if (e > b) out += "-" + esc(e);
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < rule_alts.size(); ++r) {
    out += rule_names[r] + " ::=";
    for (size_t a = 0; a < rule_alts[r].size(); ++a) {
      if (a > 0) out += " |";
      for (uint32_t p = rule_alts[r][a]; syms[p].kind != SymKind::kEnd; ++p) {
        out += " ";
        out += syms[p].kind == SymKind::kRule ? rule_names[syms[p].arg]
                                              : byte_set_text(byte_sets[syms[p].arg]);
      }
      if (syms[rule_alts[r][a]].kind == SymKind::kEnd) out += " \"\"";
    }
    out += "\n";
  }
  return out;
}

// ---- TokenTrie ----

TokenTrie::TokenTrie(const std::vector<std::string>& pieces, std::vector<int32_t> eog)
    : pieces_(pieces), eog_(std::move(eog)) {
  std::vector<bool> is_eog(pieces.size(), false);
  for (int32_t t : eog_) {
    if (t >= 0 && static_cast<size_t>(t) < pieces.size()) is_eog[static_cast<size_t>(t)] = true;
  }
  std::vector<int32_t> order;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!pieces[i].empty() && !is_eog[i]) order.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return pieces[static_cast<size_t>(a)] < pieces[static_cast<size_t>(b)];
  });
  // Breadth first, so that each node's children are contiguous. A queue entry is a node and
  // the range of `order` whose pieces pass through it.
  struct Item {
    uint32_t node;
    size_t lo, hi, depth;
  };
  nodes_.push_back(Node{});
  std::deque<Item> queue{{0, 0, order.size(), 0}};
  while (!queue.empty()) {
    Item it = queue.front();
    queue.pop_front();
    size_t i = it.lo;
    Node& node = nodes_[it.node];
    node.first_token = static_cast<uint32_t>(token_ids_.size());
    while (i < it.hi && pieces[static_cast<size_t>(order[i])].size() == it.depth) {
      token_ids_.push_back(order[i++]);
    }
    nodes_[it.node].n_tokens = static_cast<uint32_t>(token_ids_.size()) - node.first_token;
    nodes_[it.node].first_child = static_cast<uint32_t>(nodes_.size());
    uint32_t n_children = 0;
    while (i < it.hi) {
      const uint8_t b = static_cast<uint8_t>(pieces[static_cast<size_t>(order[i])][it.depth]);
      size_t j = i;
      while (j < it.hi &&
             static_cast<uint8_t>(pieces[static_cast<size_t>(order[j])][it.depth]) == b) {
        ++j;
      }
      Node child;
      child.byte = b;
      nodes_.push_back(child);
      queue.push_back(Item{static_cast<uint32_t>(nodes_.size() - 1), i, j, it.depth + 1});
      ++n_children;
      i = j;
    }
    nodes_[it.node].n_children = n_children;
  }
}

std::shared_ptr<const TokenTrie> TokenTrie::from_tokenizer(const text::Tokenizer& tok) {
  std::vector<std::string> pieces(tok.n_tokens());
  std::vector<int32_t> eog;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (tok.is_eog(id)) {
      eog.push_back(id);
      continue;
    }
    pieces[i] = tok.token_to_piece(id, false);
  }
  return std::make_shared<TokenTrie>(pieces, std::move(eog));
}

// ---- GrammarMatcher ----

// Stacks as hash-consed linked lists: a stack is the id of its top node and equal stacks
// have equal ids, so sets of stacks are sorted vectors of ints. -1 is the empty stack.
struct GrammarMatcher::Work {
  struct Node {
    uint32_t pos;
    int32_t parent;
  };
  std::vector<Node> nodes;
  // Open addressing: (pos, parent) -> node id; and (stack, byte) -> advance result.
  std::vector<uint64_t> keys;
  std::vector<int32_t> vals;
  size_t used = 0;
  std::vector<uint64_t> memo_keys;
  std::vector<std::pair<uint32_t, uint32_t>> memo_vals;  // range in memo_pool
  size_t memo_used = 0;
  std::vector<int32_t> memo_pool;
  std::vector<int32_t> tmp;

  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void reset() {
    nodes.clear();
    if (keys.empty()) {
      keys.assign(1 << 12, kEmpty);
      vals.assign(1 << 12, 0);
      memo_keys.assign(1 << 12, kEmpty);
      memo_vals.assign(1 << 12, {0, 0});
    } else {
      std::fill(keys.begin(), keys.end(), kEmpty);
      std::fill(memo_keys.begin(), memo_keys.end(), kEmpty);
    }
    used = memo_used = 0;
    memo_pool.clear();
  }

  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }

  template <typename V>
  static void grow(std::vector<uint64_t>& ks, std::vector<V>& vs) {
    std::vector<uint64_t> old_k(ks.size() * 2, kEmpty);
    std::vector<V> old_v(vs.size() * 2);
    old_k.swap(ks);
    old_v.swap(vs);
    const size_t mask = ks.size() - 1;
    for (size_t i = 0; i < old_k.size(); ++i) {
      if (old_k[i] == kEmpty) continue;
      size_t h = hash(old_k[i]) & mask;
      while (ks[h] != kEmpty) h = (h + 1) & mask;
      ks[h] = old_k[i];
      vs[h] = old_v[i];
    }
  }

  int32_t intern(uint32_t pos, int32_t parent) {
    if (used * 2 >= keys.size()) grow(keys, vals);
    const uint64_t k = (uint64_t{pos} << 32) | static_cast<uint32_t>(parent + 1);
    const size_t mask = keys.size() - 1;
    size_t h = hash(k) & mask;
    while (keys[h] != kEmpty) {
      if (keys[h] == k) return vals[h];
      h = (h + 1) & mask;
    }
    keys[h] = k;
    vals[h] = static_cast<int32_t>(nodes.size());
    ++used;
    nodes.push_back(Node{pos, parent});
    return vals[h];
  }

  // The stack with `pos` pushed on `parent`, where an alternative that has ended is popped.
  int32_t push(const Grammar& g, uint32_t pos, int32_t parent) {
    return g.syms[pos].kind == SymKind::kEnd ? parent : intern(pos, parent);
  }

  // Appends to `out` every stack reachable from `s` whose top is a byte set (or -1).
  void expand(const Grammar& g, int32_t s, std::vector<int32_t>& out) {
    if (s < 0) {
      out.push_back(-1);
      return;
    }
    const Node node = nodes[static_cast<size_t>(s)];
    const Sym sym = g.syms[node.pos];
    if (sym.kind == SymKind::kBytes) {
      out.push_back(s);
      return;
    }
    // kRule (kEnd never sits on a stack: push() pops it).
    const int32_t cont = push(g, node.pos + 1, node.parent);
    for (uint32_t a : g.rule_alts[sym.arg]) expand(g, push(g, a, cont), out);
  }

  // The stacks `s` (top is a byte set) becomes after byte b, appended to `out`.
  void advance_one(const Grammar& g, int32_t s, uint8_t b, std::vector<int32_t>& out) {
    if (s < 0) return;
    const uint64_t k = (static_cast<uint64_t>(static_cast<uint32_t>(s)) << 8) | b;
    if (memo_used * 2 >= memo_keys.size()) grow(memo_keys, memo_vals);
    const size_t mask = memo_keys.size() - 1;
    size_t h = hash(k) & mask;
    while (memo_keys[h] != kEmpty) {
      if (memo_keys[h] == k) {
        const auto [lo, len] = memo_vals[h];
        out.insert(out.end(), memo_pool.begin() + lo, memo_pool.begin() + lo + len);
        return;
      }
      h = (h + 1) & mask;
    }
    const Node node = nodes[static_cast<size_t>(s)];
    tmp.clear();
    if (g.byte_sets[g.syms[node.pos].arg].has(b)) {
      std::vector<int32_t> res;
      expand(g, push(g, node.pos + 1, node.parent), res);
      tmp = std::move(res);
    }
    // expand() touches only the node table, so `h` is still the free slot for k.
    memo_keys[h] = k;
    memo_vals[h] = {static_cast<uint32_t>(memo_pool.size()), static_cast<uint32_t>(tmp.size())};
    ++memo_used;
    memo_pool.insert(memo_pool.end(), tmp.begin(), tmp.end());
    out.insert(out.end(), tmp.begin(), tmp.end());
  }

  void advance(const Grammar& g, const std::vector<int32_t>& in, uint8_t b,
               std::vector<int32_t>& out) {
    out.clear();
    for (int32_t s : in) advance_one(g, s, b, out);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }

  std::vector<int32_t> load(const std::vector<std::vector<uint32_t>>& stacks) {
    std::vector<int32_t> ids;
    for (const auto& st : stacks) {
      int32_t s = -1;
      for (uint32_t pos : st) s = intern(pos, s);
      ids.push_back(s);
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
  }

  std::vector<std::vector<uint32_t>> store(const std::vector<int32_t>& ids) const {
    std::vector<std::vector<uint32_t>> stacks;
    for (int32_t s : ids) {
      std::vector<uint32_t> st;
      for (int32_t p = s; p >= 0; p = nodes[static_cast<size_t>(p)].parent) {
        st.push_back(nodes[static_cast<size_t>(p)].pos);
      }
      std::reverse(st.begin(), st.end());
      stacks.push_back(std::move(st));
    }
    return stacks;
  }
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)), work_(std::make_unique<Work>()) {
  Work& w = *work_;
  w.reset();
  std::vector<int32_t> ids;
  for (uint32_t a : grammar_->rule_alts[grammar_->root])
    w.expand(*grammar_, w.push(*grammar_, a, -1), ids);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  stacks_ = w.store(ids);
}

GrammarMatcher::~GrammarMatcher() = default;

GrammarMatcher::GrammarMatcher(const GrammarMatcher& o)
    : grammar_(o.grammar_), stacks_(o.stacks_), work_(std::make_unique<Work>()) {}

GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher& o) {
  if (this != &o) {
    grammar_ = o.grammar_;
    stacks_ = o.stacks_;
  }
  return *this;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  Work& w = *work_;
  w.reset();
  std::vector<int32_t> cur = w.load(stacks_), next;
  for (char c : bytes) {
    w.advance(*grammar_, cur, static_cast<uint8_t>(c), next);
    if (next.empty()) return false;
    cur.swap(next);
  }
  stacks_ = w.store(cur);
  return true;
}

bool GrammarMatcher::accept_token(const TokenTrie& trie, int32_t token) {
  if (token < 0 || static_cast<size_t>(token) >= trie.n_vocab()) return false;
  const auto& eog = trie.eog_tokens();
  if (std::find(eog.begin(), eog.end(), token) != eog.end()) return is_complete();
  const std::string& piece = trie.piece(token);
  if (piece.empty()) return false;
  return accept_bytes(piece);
}

bool GrammarMatcher::is_complete() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const auto& s) { return s.empty(); });
}

bool GrammarMatcher::can_continue() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const auto& s) { return !s.empty(); });
}

void GrammarMatcher::fill_token_mask(const TokenTrie& trie, std::span<uint8_t> allowed) {
  POWER_CHECK(allowed.size() == trie.n_vocab());
  std::fill(allowed.begin(), allowed.end(), uint8_t{0});
  if (is_complete()) {
    for (int32_t t : trie.eog_tokens()) allowed[static_cast<size_t>(t)] = 1;
  }
  Work& w = *work_;
  w.reset();
  const auto& nodes = trie.nodes();
  const auto& ids = trie.token_ids();
  const Grammar& g = *grammar_;
  // Depth-first over the trie with one state set per depth.
  std::vector<std::vector<int32_t>> level(1, w.load(stacks_));
  struct Frame {
    uint32_t node;
    uint32_t next_child;
  };
  std::vector<Frame> path{{0, 0}};
  while (!path.empty()) {
    Frame& f = path.back();
    const TokenTrie::Node& n = nodes[f.node];
    if (f.next_child == n.n_children) {
      path.pop_back();
      continue;
    }
    const uint32_t c = n.first_child + f.next_child++;
    const size_t depth = path.size();
    if (level.size() <= depth) level.emplace_back();
    w.advance(g, level[depth - 1], nodes[c].byte, level[depth]);
    if (level[depth].empty()) continue;
    const TokenTrie::Node& child = nodes[c];
    for (uint32_t i = 0; i < child.n_tokens; ++i) {
      allowed[static_cast<size_t>(ids[child.first_token + i])] = 1;
    }
    if (child.n_children > 0) path.push_back(Frame{c, 0});
  }
}

}  // namespace power::grammar
