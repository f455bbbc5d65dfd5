// Macro calling convention: parameters, defaults, and the special `kwargs` / `varargs` names,
// which a macro accepts only if its body reads them (Jinja2's rule, which @huggingface/jinja
// follows by walking the body in Jinja2's visiting order).
#include <set>

#include "les/chat/jinja_interp.h"
#include "les/util/error.h"

namespace les::jinja {

namespace {

bool is_special(const std::string& name) { return name == "kwargs" || name == "varargs"; }

const std::string& param_name(const Node& p) {
  return p.kind == NodeKind::Identifier ? p.as<IdentifierNode>().name : p.as<KeywordArgumentNode>().key;
}

const Node* param_default(const Node& p) {
  return p.kind == NodeKind::KeywordArgument ? p.as<KeywordArgumentNode>().value.get() : nullptr;
}

class SpecialArgsFinder {
 public:
  std::set<std::string> declared, accessed;

  void declare(const std::string& name) {
    if (is_special(name)) declared.insert(name);
  }
  void declare_target(const Node* t) {
    if (!t) return;
    if (t->kind == NodeKind::Identifier) declare(t->as<IdentifierNode>().name);
    if (t->kind == NodeKind::TupleLiteral) {
      for (const NodePtr& e : t->as<ListNode>().items) declare_target(e.get());
    }
  }
  void declare_params(const NodeList& params) {
    for (const NodePtr& p : params) declare(param_name(*p));
  }
  void visit_defaults(const NodeList& params) {
    for (const NodePtr& p : params) visit(param_default(*p));
  }
  void visit_filter(const Node* f) {
    if (f && f->kind == NodeKind::Call) visit(f->as<CallNode>().args);  // the name is syntax, not a load
  }
  void visit(const NodeList& nodes) {
    for (const NodePtr& n : nodes) visit(n.get());
  }

  void visit(const Node* n) {
    if (!n) return;
    switch (n->kind) {
      case NodeKind::For: {
        const auto& f = n->as<ForNode>();
        declare_target(f.loopvar.get());
        if (f.iterable->kind == NodeKind::Select) {
          // Jinja visits a loop's condition after its body and else block.
          const auto& s = f.iterable->as<SelectNode>();
          visit(s.value.get());
          visit(f.body);
          visit(f.else_body);
          visit(s.test.get());
        } else {
          visit(f.iterable.get());
          visit(f.body);
          visit(f.else_body);
        }
        return;
      }
      case NodeKind::Set: {
        const auto& s = n->as<SetNode>();
        declare_target(s.target.get());
        visit(s.value.get());
        visit(s.body);
        return;
      }
      case NodeKind::Macro: {
        const auto& m = n->as<MacroNode>();
        declare_params(m.params);
        visit_defaults(m.params);
        visit(m.body);
        return;
      }
      case NodeKind::CallStatement: {
        const auto& c = n->as<CallStatementNode>();
        visit(c.call.get());
        declare_params(c.caller_params);
        visit_defaults(c.caller_params);
        visit(c.body);
        return;
      }
      case NodeKind::FilterStatement: {
        const auto& f = n->as<FilterStatementNode>();
        visit(f.body);
        visit_filter(f.filter.get());
        return;
      }
      case NodeKind::Identifier: {
        const std::string& name = n->as<IdentifierNode>().name;
        if (is_special(name) && !declared.count(name)) accessed.insert(name);
        return;
      }
      case NodeKind::Member: {
        const auto& m = n->as<MemberNode>();
        visit(m.object.get());
        if (m.computed) visit(m.property.get());
        return;
      }
      case NodeKind::Filter: {
        const auto& f = n->as<FilterNode>();
        visit(f.operand.get());
        visit_filter(f.filter.get());
        return;
      }
      case NodeKind::Test: visit(n->as<TestNode>().operand.get()); return;
      case NodeKind::Select: {
        const auto& s = n->as<SelectNode>();
        visit(s.test.get());
        visit(s.value.get());
        return;
      }
      case NodeKind::KeywordArgument: visit(n->as<KeywordArgumentNode>().value.get()); return;
      // Everything else: the children in field order.
      case NodeKind::If: {
        const auto& i = n->as<IfNode>();
        visit(i.test.get());
        visit(i.body);
        visit(i.alternate);
        return;
      }
      case NodeKind::Call: {
        const auto& c = n->as<CallNode>();
        visit(c.callee.get());
        visit(c.args);
        return;
      }
      case NodeKind::Unary: visit(n->as<UnaryNode>().operand.get()); return;
      case NodeKind::Binary: {
        const auto& b = n->as<BinaryNode>();
        visit(b.left.get());
        visit(b.right.get());
        return;
      }
      case NodeKind::Ternary: {
        const auto& t = n->as<TernaryNode>();
        visit(t.test.get());
        visit(t.if_true.get());
        visit(t.if_false.get());
        return;
      }
      case NodeKind::Slice: {
        const auto& s = n->as<SliceNode>();
        visit(s.start.get());
        visit(s.stop.get());
        visit(s.step.get());
        return;
      }
      case NodeKind::Spread:
      case NodeKind::KeywordSpread: visit(n->as<SpreadNode>().value.get()); return;
      case NodeKind::ArrayLiteral:
      case NodeKind::TupleLiteral: visit(n->as<ListNode>().items); return;
      case NodeKind::ObjectLiteral:
        for (const auto& [k, v] : n->as<ObjectNode>().entries) {
          visit(k.get());
          visit(v.get());
        }
        return;
      case NodeKind::Break: case NodeKind::Continue: case NodeKind::Comment:
      case NodeKind::StringLiteral: case NodeKind::IntegerLiteral: case NodeKind::FloatLiteral:
        return;
    }
  }
};

}  // namespace

SpecialArgs find_special_args(const NodeList& params, const NodeList& body) {
  SpecialArgsFinder f;
  f.declare_params(params);  // the macro's own defaults are not scanned
  f.visit(body);
  return {f.accessed.count("kwargs") > 0, f.accessed.count("varargs") > 0};
}

void bind_macro_args(Interpreter& in, const std::string& display_name, const NodeList& params,
                     const SpecialArgs& special, std::vector<Value> args, const EnvPtr& scope) {
  Dict keywords;
  if (!args.empty() && args.back().kind == Kind::KwArgs) {
    keywords = args.back().dict();
    args.pop_back();
  }
  std::vector<std::pair<std::string, const Node*>> pending_defaults;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = param_name(*params[i]);
    std::optional<Value> value;
    if (i < args.size()) value = args[i];
    if (!value) {
      if (const Value* kw = keywords.find(name)) {
        value = *kw;
        keywords.erase(name);
      }
    }
    if (!value) {
      if (const Node* def = param_default(*params[i])) pending_defaults.emplace_back(name, def);
    }
    scope->set(name, value.value_or(Value::undefined()));
  }
  if (special.kwargs) {
    scope->set("kwargs", Value::dict(keywords));
  } else if (keywords.size() > 0) {
    throw RuntimeError("macro " + display_name + " takes no keyword argument '" + keywords.items()[0].first + "'");
  }
  if (special.varargs) {
    Array rest;
    for (size_t i = params.size(); i < args.size(); ++i) rest.push_back(args[i]);
    scope->set("varargs", in.make_array(std::move(rest)));
  } else if (args.size() > params.size()) {
    throw RuntimeError(strfmt("macro %s takes not more than %zu argument(s)", display_name.c_str(), params.size()));
  }
  for (const auto& [name, def] : pending_defaults) scope->set(name, in.eval(*def, scope));
}

}  // namespace les::jinja
