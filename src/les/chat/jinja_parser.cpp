// Recursive-descent parser with @huggingface/jinja's grammar and precedence (lowest first):
// ternary / select `a if b [else c]`, or, and, not, comparison and membership (`in`, `not in`,
// left-associative chains), + - ~, * / // %, ** (left-associative), `is` tests, `|` filters,
// unary + -, calls and member access, primaries.
#include <algorithm>
#include <initializer_list>
#include <set>

#include "les/chat/jinja_ast.h"
#include "les/chat/jinja_js.h"
#include "les/chat/jinja_lexer.h"
#include "les/util/error.h"

namespace les::jinja {

const char* node_name(NodeKind k) {
  switch (k) {
    case NodeKind::If: return "If";
    case NodeKind::For: return "For";
    case NodeKind::Break: return "Break";
    case NodeKind::Continue: return "Continue";
    case NodeKind::Set: return "Set";
    case NodeKind::Macro: return "Macro";
    case NodeKind::Comment: return "Comment";
    case NodeKind::CallStatement: return "CallStatement";
    case NodeKind::FilterStatement: return "FilterStatement";
    case NodeKind::StringLiteral: return "StringLiteral";
    case NodeKind::IntegerLiteral: return "IntegerLiteral";
    case NodeKind::FloatLiteral: return "FloatLiteral";
    case NodeKind::ArrayLiteral: return "ArrayLiteral";
    case NodeKind::TupleLiteral: return "TupleLiteral";
    case NodeKind::ObjectLiteral: return "ObjectLiteral";
    case NodeKind::Identifier: return "Identifier";
    case NodeKind::Member: return "MemberExpression";
    case NodeKind::Call: return "CallExpression";
    case NodeKind::Unary: return "UnaryExpression";
    case NodeKind::Binary: return "BinaryExpression";
    case NodeKind::Filter: return "FilterExpression";
    case NodeKind::Test: return "TestExpression";
    case NodeKind::Select: return "SelectExpression";
    case NodeKind::Ternary: return "Ternary";
    case NodeKind::Slice: return "SliceExpression";
    case NodeKind::KeywordArgument: return "KeywordArgumentExpression";
    case NodeKind::Spread: return "SpreadExpression";
    case NodeKind::KeywordSpread: return "KeywordSpreadExpression";
  }
  return "?";
}

namespace {

// Nesting of blocks and parenthesised expressions; each level costs about 15 C++ frames.
constexpr int kMaxNesting = 100;

enum class ArgsMode { Call, Parameters };

class Parser {
 public:
  Parser(std::string_view source, std::vector<Token> tokens) : source_(source), toks_(std::move(tokens)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\n') line_starts_.push_back(static_cast<uint32_t>(i + 1));
    }
  }

  std::unique_ptr<Program> run() {
    auto program = std::make_unique<Program>();
    while (cur_ < toks_.size()) program->body.push_back(parse_any());
    return program;
  }

 private:
  // ---- token access ----

  [[noreturn]] void fail_at(size_t index, const std::string& what) const {
    if (index >= toks_.size()) {
      throw Error(strfmt("jinja: syntax error at end of template: %s", what.c_str()));
    }
    throw Error(strfmt("jinja: syntax error at %s: %s", source_position(source_, toks_[index].offset).c_str(),
                       what.c_str()));
  }
  std::string describe(size_t index) const {
    if (index >= toks_.size()) return "end of template";
    const Token& t = toks_[index];
    switch (t.type) {
      case Tok::Text: return "text";
      case Tok::Comment: return "comment";
      case Tok::StringLiteral: return "string literal";
      case Tok::Identifier: return "'" + t.value + "'";
      default: return "'" + t.value + "'";
    }
  }
  [[noreturn]] void expected(const std::string& what) const {
    fail_at(cur_, "expected " + what + ", got " + describe(cur_));
  }

  bool is(Tok t, size_t k = 0) const { return cur_ + k < toks_.size() && toks_[cur_ + k].type == t; }
  bool is_identifier(std::string_view name, size_t k = 0) const {
    return is(Tok::Identifier, k) && toks_[cur_ + k].value == name;
  }
  bool is_statement(std::initializer_list<std::string_view> names) const {
    if (!is(Tok::OpenStatement) || !is(Tok::Identifier, 1)) return false;
    const std::string& v = toks_[cur_ + 1].value;
    return std::find(names.begin(), names.end(), v) != names.end();
  }
  const Token& next(const char* what) {
    if (cur_ >= toks_.size()) expected(what);
    return toks_[cur_++];
  }
  const Token& expect(Tok type, const char* what) {
    if (!is(type)) expected(what);
    return toks_[cur_++];
  }
  void expect_identifier(std::string_view name, const char* what) {
    if (!is_identifier(name)) expected(what);
    ++cur_;
  }

  template <typename T, typename... Args>
  std::unique_ptr<T> make(size_t token_index, Args&&... args) {
    auto n = std::make_unique<T>(std::forward<Args>(args)...);
    const uint32_t offset = token_index < toks_.size() ? toks_[token_index].offset : static_cast<uint32_t>(source_.size());
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
    n->line = static_cast<uint32_t>(it - line_starts_.begin()) + 1;
    n->col = offset - *it + 1;
    return n;
  }

  struct Nest {
    explicit Nest(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail_at(p_.cur_, strfmt("nesting deeper than %d levels", kMaxNesting));
    }
    ~Nest() { --p_.depth_; }
    Parser& p_;
  };

  // ---- statements ----

  // Statements up to one of `ends` (not consumed); `block` names the construct for errors.
  NodeList parse_until(std::initializer_list<std::string_view> ends, const char* block) {
    NodeList body;
    while (!is_statement(ends)) {
      if (cur_ >= toks_.size()) fail_at(cur_, strfmt("unterminated '%s' block: expected {%% end%s %%}", block, block));
      body.push_back(parse_any());
    }
    return body;
  }

  NodePtr parse_any() {
    Nest nest(*this);
    const size_t at = cur_;
    const Token& t = next("a statement");
    switch (t.type) {
      case Tok::Comment: return make<Node>(at, NodeKind::Comment);
      case Tok::Text: {
        auto n = make<StringNode>(at);
        n->value = t.value;
        return n;
      }
      case Tok::OpenStatement: --cur_; return parse_statement();
      case Tok::OpenExpression: {
        NodePtr e = parse_expression();
        expect(Tok::CloseExpression, "'}}'");
        return e;
      }
      default: fail_at(at, "unexpected " + describe(at));
    }
  }

  void close_block(const char* name, const char* what) {
    expect(Tok::OpenStatement, what);
    expect_identifier(name, what);
    expect(Tok::CloseStatement, "'%}'");
  }

  NodePtr parse_statement() {
    const size_t at = cur_;
    expect(Tok::OpenStatement, "'{%'");
    if (!is(Tok::Identifier)) expected("a statement name");
    const std::string name = toks_[cur_].value;
    ++cur_;
    if (name == "set") return parse_set(at);
    if (name == "if") {
      NodePtr n = parse_if(at);
      close_block("endif", "{% endif %}");
      return n;
    }
    if (name == "macro") {
      NodePtr n = parse_macro(at);
      close_block("endmacro", "{% endmacro %}");
      return n;
    }
    if (name == "for") {
      NodePtr n = parse_for(at);
      close_block("endfor", "{% endfor %}");
      return n;
    }
    if (name == "call") {
      auto n = make<CallStatementNode>(at);
      if (is(Tok::OpenParen)) n->caller_params = parse_args(ArgsMode::Parameters);
      const size_t callee_at = cur_;
      NodePtr callee = parse_primary();
      if (callee->kind != NodeKind::Identifier) fail_at(callee_at, "expected an identifier after 'call'");
      auto call = make<CallNode>(callee_at);
      call->callee = std::move(callee);
      call->args = parse_args(ArgsMode::Call);
      n->call = std::move(call);
      expect(Tok::CloseStatement, "'%}'");
      n->body = parse_until({"endcall"}, "call");
      close_block("endcall", "{% endcall %}");
      return n;
    }
    if (name == "break" || name == "continue") {
      expect(Tok::CloseStatement, "'%}'");
      return make<Node>(at, name == "break" ? NodeKind::Break : NodeKind::Continue);
    }
    if (name == "filter") {
      auto n = make<FilterStatementNode>(at);
      const size_t filter_at = cur_;
      n->filter = parse_primary();
      if (n->filter->kind == NodeKind::Identifier && is(Tok::OpenParen)) {
        n->filter = parse_call_expression(std::move(n->filter), filter_at);
      }
      expect(Tok::CloseStatement, "'%}'");
      n->body = parse_until({"endfilter"}, "filter");
      close_block("endfilter", "{% endfilter %}");
      return n;
    }
    fail_at(at + 1, "unknown statement '" + name + "'");
  }

  NodePtr parse_set(size_t at) {
    auto n = make<SetNode>(at);
    n->target = parse_expression_sequence(false);
    if (is(Tok::Equals)) {
      ++cur_;
      n->value = parse_expression_sequence(false);
    } else {
      expect(Tok::CloseStatement, "'=' or '%}'");
      n->body = parse_until({"endset"}, "set");
      expect(Tok::OpenStatement, "{% endset %}");
      expect_identifier("endset", "{% endset %}");
    }
    expect(Tok::CloseStatement, "'%}'");
    return n;
  }

  NodePtr parse_if(size_t at) {
    auto n = make<IfNode>(at);
    n->test = parse_expression();
    expect(Tok::CloseStatement, "'%}'");
    n->body = parse_until({"elif", "else", "endif"}, "if");
    if (is_statement({"elif"})) {
      const size_t elif_at = cur_;
      cur_ += 2;
      n->alternate.push_back(parse_if(elif_at));
    } else if (is_statement({"else"})) {
      cur_ += 2;
      expect(Tok::CloseStatement, "'%}'");
      n->alternate = parse_until({"endif"}, "if");
    }
    return n;
  }

  NodePtr parse_macro(size_t at) {
    auto n = make<MacroNode>(at);
    const size_t name_at = cur_;
    NodePtr name = parse_primary();
    if (name->kind != NodeKind::Identifier) fail_at(name_at, "expected an identifier after 'macro'");
    n->name = name->as<IdentifierNode>().name;
    n->params = parse_args(ArgsMode::Parameters);
    expect(Tok::CloseStatement, "'%}'");
    n->body = parse_until({"endmacro"}, "macro");
    return n;
  }

  NodePtr parse_for(size_t at) {
    auto n = make<ForNode>(at);
    const size_t var_at = cur_;
    n->loopvar = parse_expression_sequence(true);
    if (n->loopvar->kind != NodeKind::Identifier && n->loopvar->kind != NodeKind::TupleLiteral) {
      fail_at(var_at, "expected an identifier or tuple for the loop variable");
    }
    if (!is_identifier("in")) expected("'in'");
    ++cur_;
    n->iterable = parse_expression();
    expect(Tok::CloseStatement, "'%}'");
    n->body = parse_until({"endfor", "else"}, "for");
    if (is_statement({"else"})) {
      cur_ += 2;
      expect(Tok::CloseStatement, "'%}'");
      n->else_body = parse_until({"endfor"}, "for");
    }
    return n;
  }

  // ---- expressions ----

  NodePtr parse_expression_sequence(bool primary) {
    const size_t at = cur_;
    NodePtr first = primary ? parse_primary() : parse_expression();
    if (!is(Tok::Comma)) return first;
    auto tuple = make<ListNode>(at, NodeKind::TupleLiteral);
    tuple->items.push_back(std::move(first));
    while (true) {
      ++cur_;  // ','
      tuple->items.push_back(primary ? parse_primary() : parse_expression());
      if (!is(Tok::Comma)) break;
    }
    return tuple;
  }

  NodePtr parse_expression() { return parse_if_expression(); }

  NodePtr parse_if_expression() {
    Nest nest(*this);
    const size_t at = cur_;
    NodePtr a = parse_or();
    if (!is_identifier("if")) return a;
    ++cur_;
    NodePtr test = parse_or();
    if (is_identifier("else")) {
      ++cur_;
      auto t = make<TernaryNode>(at);
      t->test = std::move(test);
      t->if_true = std::move(a);
      t->if_false = parse_if_expression();
      return t;
    }
    auto s = make<SelectNode>(at);
    s->value = std::move(a);
    s->test = std::move(test);
    return s;
  }

  NodePtr binary(size_t at, std::string op, NodePtr left, NodePtr right) {
    auto b = make<BinaryNode>(at);
    b->op = std::move(op);
    b->left = std::move(left);
    b->right = std::move(right);
    return b;
  }

  NodePtr parse_or() {
    const size_t at = cur_;
    NodePtr left = parse_and();
    while (is_identifier("or")) {
      ++cur_;
      left = binary(at, "or", std::move(left), parse_and());
    }
    return left;
  }

  NodePtr parse_and() {
    const size_t at = cur_;
    NodePtr left = parse_not();
    while (is_identifier("and")) {
      ++cur_;
      left = binary(at, "and", std::move(left), parse_not());
    }
    return left;
  }

  NodePtr parse_not() {
    // As @huggingface/jinja: the loop keeps only the last `not ...` it parses.
    NodePtr right;
    while (is_identifier("not")) {
      Nest nest(*this);
      const size_t at = cur_++;
      auto u = make<UnaryNode>(at);
      u->op = "not";
      u->operand = parse_not();
      right = std::move(u);
    }
    return right ? std::move(right) : parse_comparison();
  }

  NodePtr parse_comparison() {
    const size_t at = cur_;
    NodePtr left = parse_additive();
    while (true) {
      std::string op;
      if (is_identifier("not") && is_identifier("in", 1)) {
        op = "not in";
        cur_ += 2;
      } else if (is_identifier("in")) {
        op = "in";
        ++cur_;
      } else if (is(Tok::ComparisonBinaryOperator)) {
        op = toks_[cur_++].value;
      } else {
        break;
      }
      left = binary(at, std::move(op), std::move(left), parse_additive());
    }
    return left;
  }

  NodePtr parse_additive() {
    const size_t at = cur_;
    NodePtr left = parse_multiplicative();
    while (is(Tok::AdditiveBinaryOperator)) {
      std::string op = toks_[cur_++].value;
      left = binary(at, std::move(op), std::move(left), parse_multiplicative());
    }
    return left;
  }

  NodePtr parse_multiplicative() {
    const size_t at = cur_;
    NodePtr left = parse_power();
    while (is(Tok::MultiplicativeBinaryOperator)) {
      std::string op = toks_[cur_++].value;
      left = binary(at, std::move(op), std::move(left), parse_power());
    }
    return left;
  }

  NodePtr parse_power() {
    const size_t at = cur_;
    NodePtr left = parse_test();
    while (is(Tok::ExponentiationBinaryOperator)) {
      ++cur_;
      left = binary(at, "**", std::move(left), parse_test());
    }
    return left;
  }

  NodePtr parse_test() {
    const size_t at = cur_;
    NodePtr operand = parse_filter();
    while (is_identifier("is")) {
      ++cur_;
      auto t = make<TestNode>(at);
      t->negate = is_identifier("not");
      if (t->negate) ++cur_;
      const size_t name_at = cur_;
      NodePtr name = parse_primary();
      if (name->kind != NodeKind::Identifier) fail_at(name_at, "expected the name of a test after 'is'");
      t->test = name->as<IdentifierNode>().name;
      t->operand = std::move(operand);
      operand = std::move(t);
    }
    return operand;
  }

  NodePtr parse_filter() {
    const size_t at = cur_;
    NodePtr operand = parse_unary_sign();
    while (is(Tok::Pipe)) {
      ++cur_;
      const size_t name_at = cur_;
      NodePtr filter = parse_primary();
      if (filter->kind != NodeKind::Identifier) fail_at(name_at, "expected the name of a filter after '|'");
      if (is(Tok::OpenParen)) filter = parse_call_expression(std::move(filter), name_at);
      auto f = make<FilterNode>(at);
      f->operand = std::move(operand);
      f->filter = std::move(filter);
      operand = std::move(f);
    }
    return operand;
  }

  NodePtr parse_unary_sign() {
    if ((is(Tok::UnaryOperator) || is(Tok::AdditiveBinaryOperator)) &&
        (toks_[cur_].value == "-" || toks_[cur_].value == "+")) {
      Nest nest(*this);
      const size_t at = cur_;
      auto u = make<UnaryNode>(at);
      u->op = toks_[cur_++].value;
      u->operand = parse_unary_sign();
      return u;
    }
    return parse_call_member();
  }

  NodePtr parse_call_member() {
    const size_t at = cur_;
    NodePtr member = parse_member(parse_primary(), at);
    if (is(Tok::OpenParen)) return parse_call_expression(std::move(member), at);
    return member;
  }

  NodePtr parse_call_expression(NodePtr callee, size_t at) {
    Nest nest(*this);
    auto call = make<CallNode>(at);
    call->callee = std::move(callee);
    call->args = parse_args(ArgsMode::Call);
    NodePtr expr = parse_member(std::move(call), at);
    if (is(Tok::OpenParen)) expr = parse_call_expression(std::move(expr), at);
    return expr;
  }

  NodeList parse_args(ArgsMode mode) {
    expect(Tok::OpenParen, "'('");
    NodeList args;
    std::set<std::string> names;
    bool saw_keyword = false, saw_spread = false;
    while (!is(Tok::CloseParen)) {
      if (cur_ >= toks_.size()) expected("')'");
      const size_t at = cur_;
      const bool keyword_spread = is(Tok::ExponentiationBinaryOperator);
      const bool positional_spread = is(Tok::MultiplicativeBinaryOperator) && toks_[cur_].value == "*";
      if (mode == ArgsMode::Parameters && (keyword_spread || positional_spread)) {
        fail_at(at, "argument unpacking is not allowed in parameter declarations");
      }
      if (keyword_spread) {
        ++cur_;
        auto s = make<SpreadNode>(at, NodeKind::KeywordSpread);
        s->value = parse_expression();
        args.push_back(std::move(s));
        if (is(Tok::Comma)) ++cur_;
        if (!is(Tok::CloseParen)) expected("')': '**' must be applied to the final argument");
        break;
      }
      NodePtr argument;
      if (positional_spread) {
        if (saw_spread) fail_at(at, "only one '*' argument unpacking is allowed");
        saw_spread = true;
        ++cur_;
        auto s = make<SpreadNode>(at, NodeKind::Spread);
        s->value = parse_expression();
        argument = std::move(s);
      } else {
        argument = parse_expression();
        if (is(Tok::Equals)) {
          ++cur_;
          if (argument->kind != NodeKind::Identifier) {
            fail_at(at, mode == ArgsMode::Parameters ? "expected an identifier for the parameter"
                                                     : "expected an identifier for the keyword argument");
          }
          auto kw = make<KeywordArgumentNode>(at);
          kw->key = argument->as<IdentifierNode>().name;
          kw->value = parse_expression();
          argument = std::move(kw);
        }
        if (mode == ArgsMode::Parameters) {
          if (argument->kind != NodeKind::Identifier && argument->kind != NodeKind::KeywordArgument) {
            fail_at(at, "expected an identifier for the parameter");
          }
          const std::string& name = argument->kind == NodeKind::Identifier
                                        ? argument->as<IdentifierNode>().name
                                        : argument->as<KeywordArgumentNode>().key;
          if (!names.insert(name).second) fail_at(at, "duplicate parameter name '" + name + "'");
        }
        if (argument->kind == NodeKind::KeywordArgument) {
          saw_keyword = true;
        } else if (saw_keyword) {
          fail_at(at, mode == ArgsMode::Call ? "positional arguments must come before keyword arguments"
                                             : "non-default argument follows default argument");
        } else if (saw_spread) {
          fail_at(at, "positional arguments must not follow '*' argument unpacking");
        }
      }
      args.push_back(std::move(argument));
      if (is(Tok::Comma)) ++cur_;
    }
    expect(Tok::CloseParen, "')'");
    return args;
  }

  // Inside [ ]: an index expression or a slice [start:stop:step].
  NodePtr parse_subscript(size_t at) {
    std::vector<NodePtr> parts;
    bool slice = false;
    while (!is(Tok::CloseSquareBracket)) {
      if (cur_ >= toks_.size()) expected("']'");
      if (is(Tok::Colon)) {
        parts.push_back(nullptr);
        ++cur_;
        slice = true;
      } else {
        parts.push_back(parse_expression());
        if (is(Tok::Colon)) {
          ++cur_;
          slice = true;
        }
      }
    }
    if (parts.empty()) fail_at(cur_, "expected an index or slice between '[' and ']'");
    if (!slice) return std::move(parts[0]);
    if (parts.size() > 3) fail_at(at, "a slice takes at most 3 parts");
    auto s = make<SliceNode>(at);
    parts.resize(3);
    s->start = std::move(parts[0]);
    s->stop = std::move(parts[1]);
    s->step = std::move(parts[2]);
    return s;
  }

  NodePtr parse_member(NodePtr object, size_t at) {
    while (is(Tok::Dot) || is(Tok::OpenSquareBracket)) {
      const bool computed = is(Tok::OpenSquareBracket);
      const size_t op_at = cur_++;
      auto m = make<MemberNode>(at);
      m->computed = computed;
      if (computed) {
        m->property = parse_subscript(op_at);
        expect(Tok::CloseSquareBracket, "']'");
      } else {
        const size_t prop_at = cur_;
        m->property = parse_primary();
        if (m->property->kind != NodeKind::Identifier && m->property->kind != NodeKind::IntegerLiteral) {
          fail_at(prop_at, "expected an identifier or integer after '.'");
        }
      }
      m->object = std::move(object);
      object = std::move(m);
    }
    return object;
  }

  NodePtr parse_primary() {
    const size_t at = cur_;
    const Token& t = next("an expression");
    switch (t.type) {
      case Tok::NumericLiteral: {
        const bool is_float = t.value.find('.') != std::string::npos;
        auto n = make<NumberNode>(at, is_float ? NodeKind::FloatLiteral : NodeKind::IntegerLiteral);
        n->value = js::decimal_to_double(t.value);
        return n;
      }
      case Tok::StringLiteral: {
        auto n = make<StringNode>(at);
        n->value = t.value;
        while (is(Tok::StringLiteral)) n->value += toks_[cur_++].value;  // adjacent literals join
        return n;
      }
      case Tok::Identifier: {
        auto n = make<IdentifierNode>(at);
        n->name = t.value;
        return n;
      }
      case Tok::OpenParen: {
        Nest nest(*this);
        NodePtr e = parse_expression_sequence(false);
        expect(Tok::CloseParen, "')'");
        return e;
      }
      case Tok::OpenSquareBracket: {
        Nest nest(*this);
        auto n = make<ListNode>(at, NodeKind::ArrayLiteral);
        while (!is(Tok::CloseSquareBracket)) {
          if (cur_ >= toks_.size()) expected("']'");
          n->items.push_back(parse_expression());
          if (is(Tok::Comma)) ++cur_;
        }
        ++cur_;
        return n;
      }
      case Tok::OpenCurlyBracket: {
        Nest nest(*this);
        auto n = make<ObjectNode>(at);
        while (!is(Tok::CloseCurlyBracket)) {
          if (cur_ >= toks_.size()) expected("'}'");
          NodePtr key = parse_expression();
          expect(Tok::Colon, "':' between key and value");
          NodePtr value = parse_expression();
          n->entries.emplace_back(std::move(key), std::move(value));
          if (is(Tok::Comma)) ++cur_;
        }
        ++cur_;
        return n;
      }
      default: fail_at(at, "unexpected " + describe(at) + ", expected an expression");
    }
  }

  std::string_view source_;
  std::vector<Token> toks_;
  std::vector<uint32_t> line_starts_;
  size_t cur_ = 0;
  int depth_ = 0;
};

}  // namespace

std::unique_ptr<Program> parse_template(std::string_view source) {
  return Parser(source, tokenize(source)).run();
}

}  // namespace les::jinja
