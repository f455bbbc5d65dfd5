// The syntax tree of a Jinja template, shaped as @huggingface/jinja's parser shapes it (the
// evaluator depends on those shapes: a filter is an identifier or a call, a `for` iterable may be
// a select expression, `set` targets are identifiers, tuples or member expressions).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace les::jinja {

enum class NodeKind : uint8_t {
  // statements
  If, For, Break, Continue, Set, Macro, Comment, CallStatement, FilterStatement,
  // expressions
  StringLiteral, IntegerLiteral, FloatLiteral, ArrayLiteral, TupleLiteral, ObjectLiteral,
  Identifier, Member, Call, Unary, Binary, Filter, Test, Select, Ternary, Slice,
  KeywordArgument, Spread, KeywordSpread,
};
// @huggingface/jinja's name of a node type (error messages name them).
const char* node_name(NodeKind k);

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct Node {
  NodeKind kind;
  uint32_t line = 0, col = 0;  // where the node starts in the source (1-based)

  explicit Node(NodeKind k) : kind(k) {}
  virtual ~Node() = default;

  template <typename T>
  const T& as() const { return static_cast<const T&>(*this); }
};

// ---- statements ----

struct IfNode : Node {
  IfNode() : Node(NodeKind::If) {}
  NodePtr test;
  NodeList body, alternate;  // an elif is an IfNode alone in alternate
};

struct ForNode : Node {
  ForNode() : Node(NodeKind::For) {}
  NodePtr loopvar;   // Identifier or TupleLiteral
  NodePtr iterable;  // a Select node filters the items: `for x in xs if cond`
  NodeList body, else_body;
};

struct SetNode : Node {
  SetNode() : Node(NodeKind::Set) {}
  NodePtr target;  // Identifier, TupleLiteral or Member (namespace attribute); others fail at run time
  NodePtr value;   // null for a block set: {% set x %}body{% endset %}
  NodeList body;
};

struct MacroNode : Node {
  MacroNode() : Node(NodeKind::Macro) {}
  std::string name;
  NodeList params;  // Identifier, or KeywordArgument for a parameter with a default
  NodeList body;
};

struct CallStatementNode : Node {
  CallStatementNode() : Node(NodeKind::CallStatement) {}
  NodePtr call;             // a Call node whose callee is an Identifier
  NodeList caller_params;   // {% call(a, b) ... %}
  NodeList body;
};

struct FilterStatementNode : Node {
  FilterStatementNode() : Node(NodeKind::FilterStatement) {}
  NodePtr filter;  // as FilterNode::filter
  NodeList body;
};

// Break, Continue and Comment have no fields.

// ---- expressions ----

struct StringNode : Node {  // also the template's literal text
  StringNode() : Node(NodeKind::StringLiteral) {}
  std::string value;
};

struct NumberNode : Node {  // IntegerLiteral / FloatLiteral (JavaScript numbers)
  explicit NumberNode(NodeKind k) : Node(k) {}
  double value = 0;
};

struct ListNode : Node {  // ArrayLiteral / TupleLiteral
  explicit ListNode(NodeKind k) : Node(k) {}
  NodeList items;
};

struct ObjectNode : Node {
  ObjectNode() : Node(NodeKind::ObjectLiteral) {}
  std::vector<std::pair<NodePtr, NodePtr>> entries;
};

struct IdentifierNode : Node {
  IdentifierNode() : Node(NodeKind::Identifier) {}
  std::string name;
};

struct MemberNode : Node {
  MemberNode() : Node(NodeKind::Member) {}
  NodePtr object, property;  // property: a Slice node, any expression (computed), or an
  bool computed = false;     // Identifier / IntegerLiteral after a dot
};

struct CallNode : Node {
  CallNode() : Node(NodeKind::Call) {}
  NodePtr callee;
  NodeList args;  // expressions, KeywordArgument, Spread, KeywordSpread
};

struct UnaryNode : Node {
  UnaryNode() : Node(NodeKind::Unary) {}
  std::string op;  // "not", "-", "+"
  NodePtr operand;
};

struct BinaryNode : Node {
  BinaryNode() : Node(NodeKind::Binary) {}
  std::string op;  // "and", "or", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "+", "-",
  NodePtr left, right;  // "~", "*", "/", "//", "%", "**"
};

struct FilterNode : Node {
  FilterNode() : Node(NodeKind::Filter) {}
  NodePtr operand;
  NodePtr filter;  // Identifier, or Call with an Identifier callee; anything else fails at run time
};

struct TestNode : Node {
  TestNode() : Node(NodeKind::Test) {}
  NodePtr operand;
  bool negate = false;
  std::string test;
};

struct SelectNode : Node {  // `value if test` without else: undefined when the test fails
  SelectNode() : Node(NodeKind::Select) {}
  NodePtr value, test;
};

struct TernaryNode : Node {
  TernaryNode() : Node(NodeKind::Ternary) {}
  NodePtr test, if_true, if_false;
};

struct SliceNode : Node {
  SliceNode() : Node(NodeKind::Slice) {}
  NodePtr start, stop, step;  // each may be null
};

struct KeywordArgumentNode : Node {
  KeywordArgumentNode() : Node(NodeKind::KeywordArgument) {}
  std::string key;
  NodePtr value;
};

struct SpreadNode : Node {  // Spread (*x) and KeywordSpread (**x) in call arguments
  explicit SpreadNode(NodeKind k) : Node(k) {}
  NodePtr value;
};

struct Program {
  NodeList body;
};

// Tokenizes and parses a template. Throws les::Error naming line:column and what was expected.
std::unique_ptr<Program> parse_template(std::string_view source);

}  // namespace les::jinja
