"""Recursive-descent parser for the supported P4-16 subset: tokens -> :mod:`switch.frontend.p4ast`.

The grammar follows the P4-16 specification (appendix "P4 grammar").  Type names are tracked
while parsing (P4 requires declaration before use), which resolves the classic ambiguities
(``T x;`` vs ``f(x);``, ``(T) e`` vs ``(e)``, generic ``<`` vs less-than).  Constructs outside
the supported subset raise ``unsupported: <construct> at file:line:col``.
"""
from __future__ import annotations

import copy

from ..errors import Loc, P4Error, unsupported
from . import p4ast as A
from .lexer import Token

BINARY_PREC = {
    "||": 2, "&&": 3, "|": 4, "^": 5, "&": 6, "==": 7, "!=": 7,
    "<": 8, ">": 8, "<=": 8, ">=": 8, "<<": 9, ">>": 9,
    "++": 10, "+": 10, "-": 10, "|+|": 10, "|-|": 10, "*": 11, "/": 11, "%": 11,
}
#: compound assignment operators (P4-16 1.2.4), each ``op=`` for a binary operator ``op``
COMPOUND_ASSIGN = {"+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "|+|=", "|-|="}
BASE_TYPE_KW = {"bit", "int", "varbit", "bool", "error", "void", "string", "match_kind", "tuple"}


class Parser:
    def __init__(self, tokens: list[Token]):
        self.toks = tokens
        self.i = 0
        self.type_names: set[str] = set()
        self.type_scopes: list[set[str]] = []

    # -- token helpers -------------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        # past the end (a scan that stepped over eof) every read is the final eof token
        return self.toks[self.i] if self.i < len(self.toks) else self.toks[-1]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def at(self, text: str) -> bool:
        t = self.tok
        return t.text == text and t.kind in ("op", "kw", "id")

    def accept(self, text: str) -> Token | None:
        if self.at(text):
            t = self.tok
            self.i += 1
            return t
        return None

    def expect(self, text: str, what: str | None = None) -> Token:
        if self.at(text):
            t = self.tok
            self.i += 1
            return t
        raise self.err(f"expected '{text}'" + (f" {what}" if what else "") + f", found {self.desc()}")

    def desc(self, t: Token | None = None) -> str:
        t = t or self.tok
        return "end of file" if t.kind == "eof" else f"'{t.text}'"

    def err(self, msg: str, tok: Token | None = None) -> P4Error:
        return P4Error((tok or self.tok).loc, msg)

    def ident(self, what: str = "identifier") -> Token:
        t = self.tok
        # a few keywords are legal names in some positions (P4 "nonTypeName")
        if t.kind == "id" or (t.kind == "kw" and t.text in ("apply", "key", "actions", "state", "entries", "type")):
            self.i += 1
            return t
        raise self.err(f"expected {what}, found {self.desc()}")

    def is_type_name(self, name: str) -> bool:
        return name in self.type_names or any(name in s for s in self.type_scopes)

    # -- program -------------------------------------------------------------------------------
    def program(self) -> A.Program:
        decls = []
        start = self.tok.loc
        while self.tok.kind != "eof":
            if self.accept(";"):
                continue
            decls.append(self.declaration())
        return A.Program(start, decls)

    def annotations(self) -> list[A.Annotation]:
        out = []
        while self.at("@"):
            at = self.expect("@")
            name = self.ident("annotation name").text
            args: list = []
            if self.at("(") and self.tok.loc.line == at.loc.line or self.at("("):
                self.expect("(")
                depth = 1
                start = self.i
                # try to parse as expression list; fall back to raw tokens
                try:
                    if not self.at(")"):
                        args.append(self.expression())
                        while self.accept(","):
                            args.append(self.expression())
                    self.expect(")")
                except P4Error:
                    self.i = start
                    raw = []
                    while depth:
                        t = self.tok
                        if t.kind == "eof":
                            raise self.err("unterminated annotation")
                        if t.text == "(":
                            depth += 1
                        elif t.text == ")":
                            depth -= 1
                        if depth:
                            raw.append(t.text)
                        self.i += 1
                    args = [" ".join(raw)]
            elif self.at("["):
                self.expect("[")
                depth = 1
                raw = []
                while depth:
                    t = self.tok
                    if t.kind == "eof":
                        raise self.err("unterminated annotation")
                    depth += t.text == "["
                    depth -= t.text == "]"
                    if depth:
                        raw.append(t.text)
                    self.i += 1
                args = [" ".join(raw)]
            out.append(A.Annotation(at.loc, name, args))
        return out

    def declaration(self):
        annots = self.annotations()
        t = self.tok
        k = t.text
        if t.kind == "kw":
            if k == "const":
                d = self.const_decl(annots)
                return d
            if k in ("header", "struct"):
                return self.header_decl(annots)
            if k == "header_union":
                return self.header_decl(annots)
            if k == "enum":
                return self.enum_decl(annots)
            if k == "error":
                self.i += 1
                return A.ErrorDecl(t.loc, "error", annots, self.name_list())
            if k == "match_kind":
                self.i += 1
                return A.MatchKindDecl(t.loc, "match_kind", annots, self.name_list())
            if k in ("typedef", "type"):
                self.i += 1
                ty = self.type_ref()
                n = self.ident("type name")
                self.expect(";")
                self.type_names.add(n.text)
                return A.TypedefDecl(n.loc, n.text, annots, ty)
            if k == "extern":
                return self.extern_decl(annots)
            if k == "parser":
                return self.parser_decl(annots)
            if k == "control":
                return self.control_decl(annots)
            if k == "package":
                return self.package_decl(annots)
            if k == "action":
                return self.action_decl(annots)
            if k == "value_set":
                raise P4Error(t.loc, "a value_set is declared inside a parser (P4-16 13.6)")
        if t.kind == "id" and self.is_type_name(k):
            # function declaration (T name(...) {...}) or instantiation (T(args) name;)
            if self.peek().kind == "id" and self.peek(2).text in ("(", "<"):
                return self.function_decl(annots)
            return self.instantiation(annots)
        if t.kind in ("kw",) and (t.text in BASE_TYPE_KW or t.text == "void"):
            return self.function_decl(annots)
        raise self.err(f"expected a declaration, found {self.desc()}")

    def function_decl(self, annots) -> A.FunctionDecl:
        ret = self.type_ref()
        n = self.ident("function name")
        if self.at("<"):
            raise unsupported("generic function", self.tok.loc)
        ps = self.params()
        body = self.block()
        return A.FunctionDecl(n.loc, n.text, annots, ret, ps, body)

    def name_list(self) -> list[tuple[str, Loc]]:
        self.expect("{")
        out = []
        while not self.at("}"):
            n = self.ident()
            out.append((n.text, n.loc))
            if not self.accept(","):
                break
        self.expect("}")
        return out

    def const_decl(self, annots) -> A.ConstDecl:
        self.expect("const")
        ty = self.type_ref()
        n = self.ident("constant name")
        self.expect("=")
        e = self.expression()
        self.expect(";")
        return A.ConstDecl(n.loc, ty, n.text, e, annots)

    def header_decl(self, annots) -> A.HeaderDecl:
        kw = self.tok
        self.i += 1
        n = self.ident("type name")
        self.type_names.add(n.text)
        if self.at("<"):
            raise unsupported("generic struct/header", self.tok.loc)
        self.expect("{")
        fields = []
        while not self.at("}"):
            fa = self.annotations()
            ft = self.type_ref()
            fn = self.ident("field name")
            self.expect(";")
            fields.append(A.FieldDecl(fn.loc, ft, fn.text, fa))
        self.expect("}")
        return A.HeaderDecl(n.loc, n.text, annots, fields, kw.text == "struct", kw.text == "header_union")

    def enum_decl(self, annots) -> A.EnumDecl:
        self.expect("enum")
        under = None
        if self.at("bit") or self.at("int"):
            under = self.type_ref()
        n = self.ident("enum name")
        self.type_names.add(n.text)
        self.expect("{")
        members = []
        while not self.at("}"):
            m = self.ident("enum member")
            v = None
            if self.accept("="):
                v = self.expression()
            members.append((m.text, v, m.loc))
            if not self.accept(","):
                break
        self.expect("}")
        return A.EnumDecl(n.loc, n.text, annots, under, members)

    def type_params(self) -> list[str]:
        out = []
        if self.accept("<"):
            while True:
                out.append(self.ident("type parameter").text)
                if not self.accept(","):
                    break
            self.expect(">")
        return out

    def params(self) -> list[A.Param]:
        self.expect("(")
        out = []
        while not self.at(")"):
            pa = self.annotations()
            d = ""
            if self.tok.text in ("in", "out", "inout") and self.tok.kind == "kw":
                d = self.tok.text
                self.i += 1
            ty = self.type_ref()
            n = self.ident("parameter name")
            default = None
            if self.accept("="):
                default = self.expression()
            out.append(A.Param(n.loc, d, ty, n.text, pa, default))
            if not self.accept(","):
                break
        self.expect(")")
        return out

    def extern_decl(self, annots):
        self.expect("extern")
        t = self.tok
        # extern function: extern RetType name<T>(...);
        if not (t.kind == "id" and (self.peek().text in ("{", "<") and not self.is_type_name(t.text)
                                    or self.peek().text == "{")):
            proto = self.method_proto(None)
            return A.ExternFuncDecl(proto.loc, proto.name, annots, proto)
        n = self.ident("extern name")
        self.type_names.add(n.text)
        tps = self.type_params()
        self.type_scopes.append(set(tps))
        self.expect("{")
        methods = []
        while not self.at("}"):
            ma = self.annotations()
            if self.tok.text == n.text and self.peek().text == "(":
                ct = self.ident()
                ps = self.params()
                self.expect(";")
                methods.append(A.MethodProto(ct.loc, None, ct.text, [], ps, ma))
            else:
                m = self.method_proto(ma)
                methods.append(m)
            if self.at("abstract"):
                raise unsupported("abstract method", self.tok.loc)
        self.expect("}")
        self.type_scopes.pop()
        return A.ExternDecl(n.loc, n.text, annots, tps, methods)

    def method_proto(self, annots) -> A.MethodProto:
        annots = (annots or []) + self.annotations()
        if self.at("abstract"):
            raise unsupported("abstract method", self.tok.loc)
        # the return type may mention the method's own type parameters (T lookahead<T>())
        save = self.i
        self.i += 1
        while self.tok.kind != "eof" and not (self.tok.kind == "id" and self.peek().text in ("(", "<")
                                               and self.toks[self.i - 1].text not in ("<", ",")):
            self.i += 1
        name_tok = self.tok
        self.i += 1
        tps = self.type_params() if self.at("<") else []
        after = self.i
        self.i = save
        self.type_scopes.append(set(tps))
        ret = self.type_ref()
        n = self.ident("method name")
        if n is not name_tok:
            raise self.err("malformed method declaration", n)
        self.i = after
        ps = self.params()
        self.type_scopes.pop()
        self.expect(";")
        return A.MethodProto(n.loc, ret, n.text, tps, ps, annots)

    def package_decl(self, annots):
        self.expect("package")
        n = self.ident("package name")
        self.type_names.add(n.text)
        tps = self.type_params()
        self.type_scopes.append(set(tps))
        ps = self.params()
        self.type_scopes.pop()
        self.expect(";")
        return A.BlockTypeDecl(n.loc, n.text, annots, "package", tps, ps)

    def _block_head(self, kind: str, annots):
        """``parser``/``control`` NAME <type params> (params) then either ``;`` (a type declaration: returned as
        ``(BlockTypeDecl, None, None, None)``) or optional constructor params and ``{`` (returns ``(None, name,
        params, ctor)`` with the type-parameter scope pushed; the caller pops it after the body)."""
        self.expect(kind)
        n = self.ident(f"{kind} name")
        self.type_names.add(n.text)
        tps = self.type_params()
        self.type_scopes.append(set(tps))
        ps = self.params()
        if self.accept(";"):
            self.type_scopes.pop()
            return A.BlockTypeDecl(n.loc, n.text, annots, kind, tps, ps), None, None, None
        if tps:
            raise unsupported(f"generic {kind}", n.loc)
        ctor = self.params() if self.at("(") else []
        self.expect("{")
        return None, n, ps, ctor

    def parser_decl(self, annots):
        decl, n, ps, ctor = self._block_head("parser", annots)
        if decl is not None:
            return decl
        locs, states = [], []
        while not self.at("}"):
            la = self.annotations()
            if self.at("state"):
                states.append(self.state(la))
            else:
                locs.append(self.local_decl(la))
        self.expect("}")
        self.type_scopes.pop()
        return A.ParserDecl(n.loc, n.text, annots, ps, ctor, locs, states)

    def state(self, annots) -> A.State:
        self.expect("state")
        n = self.ident("state name")
        self.expect("{")
        stmts = []
        tr = None
        while not self.at("}"):
            if self.at("transition"):
                tt = self.expect("transition")
                tr = self.transition(tt)
                break
            stmts.append(self.statement())
        self.expect("}")
        return A.State(n.loc, n.text, annots, stmts, tr)

    def transition(self, tt: Token) -> A.Transition:
        if self.accept("select"):
            self.expect("(")
            exprs = [self.expression()]
            while self.accept(","):
                exprs.append(self.expression())
            self.expect(")")
            self.expect("{")
            cases = []
            while not self.at("}"):
                ks = self.keyset()
                self.expect(":")
                s = self.ident("state name")
                self.expect(";")
                cases.append(A.SelectCase(ks.loc, ks, s.text))
            self.expect("}")
            return A.Transition(tt.loc, None, exprs, cases)
        s = self.ident("state name")
        self.expect(";")
        return A.Transition(s.loc, s.text)

    def keyset(self) -> A.Expr:
        t = self.tok
        if self.at("(") and self._is_tuple_keyset():
            self.expect("(")
            items = [self.simple_keyset()]
            while self.accept(","):
                items.append(self.simple_keyset())
            self.expect(")")
            return A.ListExpr(t.loc, items)
        return self.simple_keyset()

    def _is_tuple_keyset(self) -> bool:
        depth = 0
        j = self.i
        while j < len(self.toks):
            x = self.toks[j].text
            if x == "(":
                depth += 1
            elif x == ")":
                depth -= 1
                if depth == 0:
                    return False
            elif x == "," and depth == 1:
                return True
            j += 1
        return False

    def simple_keyset(self) -> A.Expr:
        t = self.tok
        if self.accept("default"):
            return A.Default(t.loc, False)
        if self.tok.kind == "id" and self.tok.text == "_":
            self.i += 1
            return A.Default(t.loc, True)
        e = self.expression()
        if self.accept("&&&"):
            return A.Mask(t.loc, e, self.expression())
        if self.accept(".."):
            return A.Range(t.loc, e, self.expression())
        return e

    def control_decl(self, annots):
        decl, n, ps, ctor = self._block_head("control", annots)
        if decl is not None:
            return decl
        locs = []
        apply = None
        while not self.at("}"):
            la = self.annotations()
            if self.at("apply"):
                self.i += 1
                apply = self.block()
                continue
            if self.at("action"):
                locs.append(self.action_decl(la))
            elif self.at("table"):
                locs.append(self.table_decl(la))
            else:
                locs.append(self.local_decl(la))
        self.expect("}")
        self.type_scopes.pop()
        if apply is None:
            raise P4Error(n.loc, f"control {n.text} has no apply block")
        return A.ControlDecl(n.loc, n.text, annots, ps, ctor, locs, apply)

    def local_decl(self, annots):
        t = self.tok
        if self.at("const"):
            return self.const_decl(annots)
        if self.at("value_set"):
            self.expect("value_set")
            self.expect("<")
            ty = self.type_ref()
            self.expect(">")
            self.expect("(")
            size = self.expression()
            self.expect(")")
            n = self.ident("value set name")
            self.expect(";")
            return A.ValueSetDecl(n.loc, n.text, annots, ty, size)
        if self.at("action") or self.at("table"):
            raise self.err(f"'{t.text}' is not allowed here")
        if self.tok.kind == "id" and self.is_type_name(t.text) and self.peek().text in ("(", "<") \
                and self._looks_like_instantiation():
            return self.instantiation(annots)
        s = self.var_decl(annots)
        return s

    def _looks_like_instantiation(self) -> bool:
        # T(args) name;  or  T<...>(args) name;  (vs. a variable of generic type T<...> x;)
        j = self.i + 1
        if self.toks[j].text == "<":
            depth = 0
            while j < len(self.toks):
                x = self.toks[j].text
                depth += x == "<"
                depth -= x == ">"
                j += 1
                if depth == 0:
                    break
        return j < len(self.toks) and self.toks[j].text == "("

    def instantiation(self, annots) -> A.Instance:
        ty = self.type_ref()
        args = self.arguments()
        n = self.ident("instance name")
        self.expect(";")
        return A.Instance(n.loc, ty, args, n.text, annots)

    def var_decl(self, annots) -> A.VarDecl:
        ty = self.type_ref()
        n = self.ident("variable name")
        init = None
        if self.accept("="):
            init = self.expression()
        self.expect(";")
        return A.VarDecl(n.loc, ty, n.text, init, annots)

    def action_decl(self, annots) -> A.ActionDecl:
        self.expect("action")
        n = self.ident("action name")
        ps = self.params()
        body = self.block()
        return A.ActionDecl(n.loc, n.text, annots, ps, body)

    def table_decl(self, annots) -> A.TableDecl:
        self.expect("table")
        n = self.ident("table name")
        td = A.TableDecl(n.loc, n.text, annots)
        self.expect("{")
        while not self.at("}"):
            self.annotations()                   # a property's annotations are not used
            is_const = bool(self.accept("const"))
            pn = self.ident("table property")
            p = pn.text
            if p == "key":
                self.expect("=")
                self.expect("{")
                td.has_key = True
                while not self.at("}"):
                    e = self.expression()
                    self.expect(":")
                    mk = self.ident("match kind")
                    ka = self.annotations()
                    self.expect(";")
                    td.keys.append(A.KeyElement(e.loc, e, mk.text, ka))
                self.expect("}")
            elif p == "actions":
                self.expect("=")
                self.expect("{")
                td.has_actions = True
                while not self.at("}"):
                    aa = self.annotations()
                    an = self.dotted_name()
                    args = self.arguments() if self.at("(") else None
                    self.expect(";")
                    td.actions.append(A.ActionRef(an[1], an[0], args, aa))
                self.expect("}")
            elif p == "default_action":
                self.expect("=")
                an = self.dotted_name()
                args = self.arguments() if self.at("(") else []
                self.expect(";")
                td.default_action = A.ActionRef(an[1], an[0], args)
                td.const_default = is_const
            elif p == "entries":
                self.expect("=")
                self.expect("{")
                td.entries = []
                td.const_entries = is_const
                while not self.at("}"):
                    if self.at("@"):
                        raise P4Error(self.tok.loc, "an entry's annotations go after its action, as in "
                                                    "'key : action(args) @priority(1);' (P4-16 14.2.1.4)")
                    prio = None
                    if self.at("priority") and self.peek().text == "=":
                        self.i += 2          # p4c's grammar: priority=INTEGER: or priority=(expression):
                        if self.accept("("):
                            prio = self.expression()
                            self.expect(")")
                        elif self.tok.kind == "int":
                            prio = self.primary()
                            if prio.value >= 1 << 31:     # p4c reads the literal as an int
                                raise P4Error(prio.loc, f"entry priority {prio.value} is too large for p4c (its "
                                                        "limit: 2**31 - 1, 'this implementation does not support "
                                                        "bitstrings this large'); write priority=(n) for more")
                        else:
                            raise self.err(f"expected an integer or '(' after 'priority =', found {self.desc()}")
                        self.expect(":")
                    ks = self.keyset()
                    self.expect(":")
                    an = self.dotted_name()
                    args = self.arguments() if self.at("(") else []
                    ea = self.annotations()
                    self.expect(";")
                    keys = ks.items if isinstance(ks, A.ListExpr) else [ks]
                    td.entries.append(A.EntryDecl(ks.loc, keys, A.ActionRef(an[1], an[0], args), prio, ea))
                self.expect("}")
            else:
                self.expect("=")
                e = self.expression()
                self.expect(";")
                if p == "size":
                    td.size = e
                elif p == "implementation":
                    td.implementation = e
                elif p == "counters":
                    td.counters = e
                elif p == "meters":
                    td.meters = e
                else:
                    td.props[p] = e
        self.expect("}")
        return td

    def dotted_name(self) -> tuple[str, Loc]:
        loc = self.tok.loc
        name = ""
        if self.accept("."):
            name = "."
        name += self.ident("action name").text
        while self.at(".") and self.peek().kind == "id":
            self.i += 1
            name += "." + self.ident().text
        return name, loc

    # -- types ---------------------------------------------------------------------------------
    def type_ref(self) -> A.TypeRef:
        t = self.tok
        k = t.text
        if t.kind == "kw" and k in ("bit", "int", "varbit"):
            self.i += 1
            width = None
            if self.accept("<"):
                if self.tok.kind == "int":
                    w = self.tok
                    self.i += 1
                    width = A.Lit(w.loc, w.value[0])
                else:
                    self.expect("(")
                    width = self.expression()
                    self.expect(")")
                self.expect(">")
            elif k == "varbit":
                raise self.err("varbit needs a width")
            elif k == "int":
                ty = A.TypeRef(t.loc, "int")
                return self._stack_suffix(ty)
            else:
                width = A.Lit(t.loc, 1)
            ty = A.TypeRef(t.loc, k, width)
        elif t.kind == "kw" and k in ("bool", "error", "void", "string", "match_kind"):
            self.i += 1
            ty = A.TypeRef(t.loc, k)
        elif t.kind == "kw" and k == "tuple":
            self.i += 1
            self.expect("<")
            args = [self.type_ref()]
            while self.accept(","):
                args.append(self.type_ref())
            self.expect(">")
            ty = A.TypeRef(t.loc, "tuple", args=args)
        elif t.kind == "id" and t.text == "_":
            self.i += 1
            ty = A.TypeRef(t.loc, "dontcare")
        elif t.kind == "id" or (t.kind == "op" and t.text == "."):
            if self.accept("."):
                t = self.tok
            if t.kind != "id":
                raise self.err(f"expected a type, found {self.desc()}")
            if not self.is_type_name(t.text):
                raise P4Error(t.loc, f"unknown type '{t.text}'")
            self.i += 1
            args = []
            if self.at("<"):
                self.expect("<")
                args.append(self.type_ref())
                while self.accept(","):
                    args.append(self.type_ref())
                self.expect(">")
            ty = A.TypeRef(t.loc, "name", name=t.text, args=args)
        else:
            raise self.err(f"expected a type, found {self.desc()}")
        return self._stack_suffix(ty)

    def _stack_suffix(self, ty: A.TypeRef) -> A.TypeRef:
        if self.at("["):
            lb = self.expect("[")
            size = self.expression()
            self.expect("]")
            return A.TypeRef(lb.loc, "stack", args=[ty], size=size)
        return ty

    # -- statements ----------------------------------------------------------------------------
    def block(self) -> A.Block:
        lb = self.expect("{")
        stmts = []
        while not self.at("}"):
            if self.tok.kind == "eof":
                raise self.err("expected '}', found end of file")
            stmts.append(self.statement())
        self.expect("}")
        return A.Block(lb.loc, stmts)

    def statement(self) -> A.Stmt:
        annots = self.annotations()
        t = self.tok
        k = t.text
        if self.at("{"):
            return self.block()
        if t.kind == "op" and k == ";":
            self.i += 1
            return A.Empty(t.loc)
        if t.kind == "id" and k == "for" and self.peek().text == "(" and not self.is_type_name(k):
            return self.for_stmt()
        if t.kind == "id" and k in ("break", "continue") and self.peek().text == ";" and not self.is_type_name(k):
            self.i += 2
            return A.Break(t.loc) if k == "break" else A.Continue(t.loc)
        if t.kind == "kw":
            if k == "if":
                self.i += 1
                self.expect("(")
                c = self.expression()
                self.expect(")")
                th = self.statement()
                el = self.statement() if self.accept("else") else None
                return A.If(t.loc, c, th, el)
            if k == "switch":
                return self.switch_stmt()
            if k == "exit":
                self.i += 1
                self.expect(";")
                return A.Exit(t.loc)
            if k == "return":
                self.i += 1
                e = None if self.at(";") else self.expression()
                self.expect(";")
                return A.Return(t.loc, e)
            if k == "const":
                return self.const_decl(annots)
            if k in ("bit", "int", "varbit", "bool", "error", "tuple") and not (k == "error" and self.peek().text == "."):
                return self.var_decl(annots)
            if k in ("transition",):
                raise self.err("transition must be the last statement of a state")
        if t.kind == "id" and self.is_type_name(k) and self.peek().text != ".":
            if self._looks_like_instantiation():
                raise unsupported("instantiation inside a block", t.loc)
            return self.var_decl(annots)
        e = self.expression()
        a = self._assignment(t, e)
        if a is not None:
            self.expect(";")
            return a
        if not isinstance(e, A.Call):
            raise P4Error(t.loc, "expression is not a statement (expected an assignment or a call)")
        self.expect(";")
        return A.CallStmt(t.loc, e)

    def _simple_stmt(self) -> A.Stmt:
        """An assignment or call, as in a for loop's init and update lists (no ';')."""
        t = self.tok
        e = self.expression()
        a = self._assignment(t, e)
        if a is not None:
            return a
        if not isinstance(e, A.Call):
            raise P4Error(t.loc, "expected an assignment or a call")
        return A.CallStmt(t.loc, e)

    def _assignment(self, t: Token, lhs: A.Expr) -> A.Assign | None:
        """The rest of an assignment to ``lhs`` (``= e``, or a compound ``op= e``), or None when no assignment
        operator follows.  ``a op= b`` becomes ``a = a op b`` (P4-16 1.2.4, 12.1: the operator's typing rules
        apply, and ``a`` is evaluated once): ``a`` is read and written at the same place, which is one
        evaluation unless ``a`` holds a call (an index computed by a function), refused as not evaluated once."""
        op = self.tok
        if self.accept("="):
            return A.Assign(t.loc, lhs, self.expression())
        if op.kind != "op" or op.text not in COMPOUND_ASSIGN:
            return None
        self.i += 1
        if _holds_call(lhs):
            raise unsupported(f"'{op.text}' on a left-hand side that calls a function", op.loc)
        rhs = self.expression()
        return A.Assign(t.loc, lhs, A.Binary(op.loc, op.text[:-1], copy.deepcopy(lhs), rhs))

    def for_stmt(self) -> A.For:
        """``for (init; cond; update) stmt`` and ``for (T x in lo .. hi) stmt`` (P4-16 1.2.4); the range form
        becomes ``for (T x = lo; x <= hi; x = x + 1)`` marked ``in_range``: the checker types it like any loop,
        then refuses it as p4c's BMv2 back end does (switch.frontend.bmv2_rules.check_for_in)."""
        t = self.tok
        self.i += 1
        self.expect("(")
        # range form: [type] name in lo .. hi
        j = self.i
        while self.toks[j].text not in (";", ")", "in") and self.toks[j].kind != "eof":
            j += 1
        if self.toks[j].text == "in":
            ty = self.type_ref() if self.i + 1 < j else None
            n = self.ident("loop variable")
            self.expect("in")
            lo = self.expression()
            self.expect("..")
            hi = self.expression()
            self.expect(")")
            body = self.statement()
            var = A.Name(n.loc, n.text)
            init = A.VarDecl(n.loc, ty, n.text, lo) if ty is not None else A.Assign(n.loc, var, lo)
            step = A.Assign(n.loc, A.Name(n.loc, n.text), A.Binary(n.loc, "+", A.Name(n.loc, n.text), A.Lit(n.loc, 1)))
            return A.For(t.loc, [init], A.Binary(n.loc, "<=", A.Name(n.loc, n.text), hi), [step], body,
                         in_range=True)
        init: list[A.Stmt] = []
        while not self.at(";"):
            if self.tok.kind in ("id", "kw") and (self.is_type_name(self.tok.text) or self.tok.text in BASE_TYPE_KW) \
                    and self.peek().kind == "id" or (self.tok.text in BASE_TYPE_KW and self.peek().text == "<"):
                ty = self.type_ref()
                n = self.ident("variable name")
                self.expect("=")
                init.append(A.VarDecl(n.loc, ty, n.text, self.expression()))
            else:
                init.append(self._simple_stmt())
            if not self.accept(","):
                break
        self.expect(";")
        cond = None if self.at(";") else self.expression()
        self.expect(";")
        update: list[A.Stmt] = []
        while not self.at(")"):
            update.append(self._simple_stmt())
            if not self.accept(","):
                break
        self.expect(")")
        return A.For(t.loc, init, cond, update, self.statement())

    def switch_stmt(self) -> A.Switch:
        t = self.expect("switch")
        self.expect("(")
        e = self.expression()
        self.expect(")")
        self.expect("{")
        cases = []
        while not self.at("}"):
            lt = self.tok
            if self.accept("default"):
                label = A.Default(lt.loc)
            else:
                label = self.expression()
            self.expect(":")
            body = self.block() if self.at("{") else None
            cases.append(A.SwitchCase(lt.loc, [label], body))
        self.expect("}")
        return A.Switch(t.loc, e, cases)

    # -- expressions ---------------------------------------------------------------------------
    def arguments(self) -> list[A.Expr]:
        self.expect("(")
        args = []
        while not self.at(")"):
            if self.tok.kind == "id" and self.peek().text == "=" and self.peek(2).text != "=":
                n = self.ident()
                self.expect("=")
                v = A.Default(self.tok.loc, True) if self.tok.text == "_" and self.peek().text in (",", ")") \
                    else None
                if v is not None:
                    self.i += 1
                args.append(A.NamedArg(n.loc, n.text, v if v is not None else self.expression()))
            elif self.tok.kind == "id" and self.tok.text == "_":
                t = self.tok
                self.i += 1
                args.append(A.Default(t.loc, True))
            else:
                args.append(self.expression())
            if not self.accept(","):
                break
        self.expect(")")
        return args

    def expression(self, min_prec: int = 0) -> A.Expr:
        left = self.unary()
        while True:
            t = self.tok
            op = t.text if t.kind == "op" else None
            if op == ">" and t.adjacent and self.peek().text == ">":
                op = ">>"
            if op == "?" and min_prec <= 1:
                self.i += 1
                a = self.expression(1)
                self.expect(":")
                b = self.expression(1)
                left = A.Ternary(t.loc, left, a, b)
                continue
            prec = BINARY_PREC.get(op or "")
            if prec is None or prec < min_prec or (prec == min_prec and min_prec > 0 and False):
                return left
            if prec <= min_prec - 1:
                return left
            self.i += 2 if op == ">>" else 1
            right = self.expression(prec + 1)
            left = A.Binary(t.loc, op, left, right)

    def unary(self) -> A.Expr:
        t = self.tok
        if t.kind == "op" and t.text in ("!", "~", "-", "+"):
            self.i += 1
            e = self.unary()
            return e if t.text == "+" else A.Unary(t.loc, t.text, e)
        if t.kind == "op" and t.text == "(" and self._is_cast():
            self.i += 1
            ty = self.type_ref()
            self.expect(")")
            return A.Cast(t.loc, ty, self.unary())
        return self.postfix(self.primary())

    def _is_cast(self) -> bool:
        n = self.peek()
        if n.kind == "kw" and n.text in ("bit", "int", "varbit", "bool"):
            return True
        if n.kind == "kw" and n.text == "error":
            return self.peek(2).text == ")"
        if n.kind == "id" and self.is_type_name(n.text):
            return self.peek(2).text in (")", "<")
        return False

    def primary(self) -> A.Expr:
        t = self.tok
        if t.kind == "int":
            self.i += 1
            v, w, s = t.value
            return A.Lit(t.loc, v, w, s)
        if t.kind == "str":
            self.i += 1
            return A.StrLit(t.loc, t.value)
        if t.kind == "kw" and t.text in ("true", "false"):
            self.i += 1
            return A.BoolLit(t.loc, t.text == "true")
        if self.accept("("):
            e = self.expression()
            self.expect(")")
            return e
        if self.at("{"):
            self.i += 1
            items = []
            names: list[str] = []
            while not self.at("}"):
                if self.tok.kind == "id" and self.peek().text == "=":
                    n = self.ident()
                    self.expect("=")
                    names.append(n.text)
                elif names:
                    raise self.err("in a structure-valued expression every item is 'field = value'")
                items.append(self.expression())
                if not self.accept(","):
                    break
            self.expect("}")
            if names:
                if len(names) != len(items):
                    raise P4Error(t.loc, "in a structure-valued expression every item is 'field = value'")
                return A.StructExpr(t.loc, items, names)
            return A.ListExpr(t.loc, items)
        if t.kind == "op" and t.text == ".":
            self.i += 1
            n = self.ident()
            return A.Name(n.loc, n.text)
        if t.kind == "kw" and t.text in ("error", "bit", "int", "bool"):
            if t.text == "error":
                self.i += 1
                return A.Name(t.loc, "error")
        if t.kind == "id" or (t.kind == "kw" and t.text in ("apply", "key", "actions", "state", "entries", "type")):
            self.i += 1
            return A.Name(t.loc, t.text)
        raise self.err(f"expected an expression, found {self.desc()}")

    def postfix(self, e: A.Expr) -> A.Expr:
        while True:
            if self.at("."):
                self.i += 1
                n = self.ident("member name")
                e = A.Member(e.loc, e, n.text)
                e.name_loc = n.loc
            elif self.at("["):
                self.i += 1
                a = self.expression()
                if self.accept(":"):
                    b = self.expression()
                    self.expect("]")
                    e = A.Slice(e.loc, e, a, b)
                else:
                    self.expect("]")
                    e = A.Index(e.loc, e, a)
            elif self.at("("):
                args = self.arguments()
                e = A.Call(e.loc, e, [], args)
            elif self.at("<") and isinstance(e, (A.Name, A.Member)) and self._generic_call_ahead():
                self.i += 1
                targs = [self.type_ref()]
                while self.accept(","):
                    targs.append(self.type_ref())
                self.expect(">")
                args = self.arguments()
                e = A.Call(e.loc, e, targs, args)
            else:
                return e

    def _generic_call_ahead(self) -> bool:
        save = self.i
        try:
            self.i += 1
            self.type_ref()
            while self.accept(","):
                self.type_ref()
            ok = self.at(">") and self.peek().text == "("
        except P4Error:
            ok = False
        self.i = save
        return ok


def parse(tokens: list[Token]) -> A.Program:
    """Parse a preprocessed token list into a :class:`~switch.frontend.p4ast.Program`."""
    return Parser(tokens).program()


def _holds_call(e: A.Expr) -> bool:
    """Whether expression ``e`` contains a call (of a function, method or action) anywhere."""
    if isinstance(e, A.Call):
        return True
    for v in vars(e).values():
        if isinstance(v, A.Expr) and _holds_call(v):
            return True
        if isinstance(v, list) and any(isinstance(x, A.Expr) and _holds_call(x) for x in v):
            return True
    return False
