"""PLY productions of the .mp language (one ``p_*`` method per production, pycparser style).

``parse(text, filename, sink)`` returns a :class:`morphgen.grammar.ast.Module` (or ``None``
when nothing could be recovered) and reports every lexical and syntax error it finds to
``sink``.  A statement whose ``;`` is missing at the end of its line is reported there and
parsed as if the ``;`` were written (one error, not a cascade); other errors resynchronise on
statement boundaries (``;`` and ``}``).  The LALR tables are built in memory once per process;
nothing is written to disk.
"""
from __future__ import annotations

import bisect
import re

import ply.lex as lex
import ply.yacc as yacc

from . import ast as A
from .diagnostics import show
from . import lexer as L


class ParseContext:
    """Per-parse state shared by the lexer and the parser."""

    def __init__(self, text: str, filename: str, sink):
        self.text = text
        self.filename = filename
        self.sink = sink
        # Offsets where each line starts, so that a token's line is a binary search rather
        # than a count over everything before it (which made parsing quadratic).
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def coord_at(self, lexpos: int) -> A.Coord:
        line = bisect.bisect_right(self.line_starts, lexpos)
        return A.Coord(self.filename, line, lexpos - self.line_starts[line - 1] + 1)

    def lex_error(self, lexpos: int, message: str) -> None:
        self.sink.error(self.coord_at(lexpos), message)


class TokenFeed:
    """The lexer's tokens for the parser, remembering where the last two ended, with room to put
    one back: the parser inserts a missing ';' before the token it was given."""

    def __init__(self, lexer):
        self.lexer = lexer
        self.put_back = []          # tokens to hand out again before lexing on
        self.recent = []            # (token, offset just past it) of the last two handed out
        self.open_braces = []       # offsets of the '{' not closed yet, innermost last

    def token(self):
        if self.put_back:
            tok, end = self.put_back.pop()
        else:
            tok = self.lexer.token()
            end = self.lexer.lexpos
        if tok is not None and not (self.recent and self.recent[-1][0] is tok):     # not handed out again
            self.recent = self.recent[-1:] + [(tok, end)]
            if tok.type == "LBRACE":
                self.open_braces.append(tok.lexpos)
            elif tok.type == "RBRACE" and self.open_braces:
                self.open_braces.pop()
        return tok

    def again(self) -> None:
        """Hand out the last token once more, next time (the parser takes a ';' before it)."""
        self.put_back.append(self.recent[-1])


class Grammar:
    tokens = L.tokens

    precedence = (
        ("nonassoc", "IFX"),
        ("nonassoc", "ELSE"),
        ("left", "OR"),
        ("left", "AND"),
        ("nonassoc", "EQ", "NE"),
        ("nonassoc", "LT", "GT", "LE", "GE"),
        ("left", "PLUS", "MINUS"),
        ("left", "TIMES", "DIVIDE", "MOD"),
        ("right", "UMINUS", "NOT"),
    )

    def __init__(self):
        self.ctx: ParseContext | None = None
        self.feed: TokenFeed | None = None
        self.semicolons_inserted: set = set()       # offsets of the tokens a ';' was put before
        self.parser = yacc.yacc(module=self, start="module", write_tables=False, debug=False,
                                errorlog=yacc.NullLogger())

    # -- helpers ---------------------------------------------------------------------------
    def _c(self, p, n) -> A.Coord:
        return self.ctx.coord_at(p.lexpos(n))

    # -- module ----------------------------------------------------------------------------
    def p_module(self, p):
        """module : function_list"""
        first = p[1][0].coord if p[1] else A.Coord(self.ctx.filename, 1, 1)
        p[0] = A.Module(first, p[1])

    def p_function_list(self, p):
        """function_list : function
                         | function_list function"""
        p[0] = _items(p, 2)

    def p_function(self, p):
        """function : FUNCTION ID LPAREN params_opt RPAREN block"""
        p[0] = A.Function(self._c(p, 2), p[2], p[4], p[6])

    def p_params_opt(self, p):
        """params_opt : params
                      | empty"""
        p[0] = p[1] or []

    def p_params(self, p):
        """params : param
                  | params COMMA param"""
        p[0] = _items(p, 3)

    def p_param(self, p):
        """param : type ID"""
        p[0] = A.Param(self._c(p, 2), p[1], p[2])

    # -- types -----------------------------------------------------------------------------
    def p_type_simple(self, p):
        """type : GRAPH
                | INT
                | FLOAT
                | BOOL"""
        p[0] = A.TypeSpec(self._c(p, 1), p[1])

    def p_type_generic(self, p):
        """type : PROPNODE LT elem_type GT
                | PROPEDGE LT elem_type GT
                | WEIGHT LT elem_type GT"""
        elem, dims = p[3]
        p[0] = A.TypeSpec(self._c(p, 1), p[1], elem, dims)

    def p_elem_type(self, p):
        """elem_type : INT dims_opt
                     | FLOAT dims_opt
                     | BOOL dims_opt"""
        p[0] = (p[1], p[2])

    def p_dims_opt(self, p):
        """dims_opt : dims_opt LBRACKET expr RBRACKET
                    | empty"""
        p[0] = [] if len(p) == 2 else _append(p[1], p[3])

    # -- statements ------------------------------------------------------------------------
    def p_block(self, p):
        """block : LBRACE stmts RBRACE"""
        p[0] = A.Block(self._c(p, 1), p[2])

    def p_stmts(self, p):
        """stmts : stmts stmt
                 | empty"""
        if len(p) == 2:
            p[0] = []
        else:
            p[0] = p[1] if p[2] is None else _append(p[1], p[2])

    def p_stmt_simple(self, p):
        """stmt : decl SEMI
                | simple SEMI"""
        p[0] = p[1]

    def p_stmt_compound(self, p):
        """stmt : block
                | for_stmt
                | forall_stmt
                | if_stmt
                | while_stmt"""
        p[0] = p[1]

    def p_stmt_empty(self, p):
        """stmt : SEMI"""
        p[0] = None

    def p_stmt_error(self, p):
        """stmt : error SEMI
                | error RBRACE"""
        p[0] = None

    def p_decl(self, p):
        """decl : type declarators"""
        p[0] = A.Decl(p[1].coord, p[1], p[2])

    def p_declarators(self, p):
        """declarators : declarator
                       | declarators COMMA declarator"""
        p[0] = _items(p, 3)

    def p_declarator(self, p):
        """declarator : ID
                      | ID ASSIGN expr"""
        p[0] = A.Declarator(self._c(p, 1), p[1], p[3] if len(p) == 4 else None)

    def p_simple_assign(self, p):
        """simple : postfix ASSIGN expr
                  | postfix PLUSEQ expr
                  | postfix MINUSEQ expr
                  | postfix TIMESEQ expr
                  | postfix DIVEQ expr"""
        p[0] = A.Assign(self._c(p, 2), p[1], p[2], p[3])

    def p_simple_incdec(self, p):
        """simple : postfix INC
                  | postfix DEC"""
        p[0] = A.Assign(self._c(p, 2), p[1], p[2], None)

    def p_simple_expr(self, p):
        """simple : expr"""
        p[0] = A.ExprStmt(p[1].coord, p[1])

    def p_for(self, p):
        """for_stmt : FOR LPAREN for_init SEMI expr SEMI simple RPAREN stmt"""
        p[0] = A.For(self._c(p, 1), p[3], p[5], p[7], _body(p[9], self._c(p, 8)))

    def p_for_init(self, p):
        """for_init : decl
                    | simple"""
        p[0] = p[1]

    def p_forall(self, p):
        """forall_stmt : FORALL LPAREN ID IN expr RPAREN stmt"""
        p[0] = A.Forall(self._c(p, 1), p[3], self._c(p, 3), p[5], _body(p[7], self._c(p, 6)))

    def p_if(self, p):
        """if_stmt : IF LPAREN expr RPAREN stmt %prec IFX
                   | IF LPAREN expr RPAREN stmt ELSE stmt"""
        orelse = _body(p[7], self._c(p, 6)) if len(p) == 8 else None
        p[0] = A.If(self._c(p, 1), p[3], _body(p[5], self._c(p, 4)), orelse)

    def p_while(self, p):
        """while_stmt : WHILE LPAREN expr RPAREN stmt"""
        p[0] = A.While(self._c(p, 1), p[3], _body(p[5], self._c(p, 4)))

    # -- expressions -----------------------------------------------------------------------
    def p_expr_binary(self, p):
        """expr : expr PLUS expr
                | expr MINUS expr
                | expr TIMES expr
                | expr DIVIDE expr
                | expr MOD expr
                | expr LT expr
                | expr GT expr
                | expr LE expr
                | expr GE expr
                | expr EQ expr
                | expr NE expr
                | expr AND expr
                | expr OR expr"""
        p[0] = A.BinOp(self._c(p, 2), p[2], p[1], p[3])

    def p_expr_unary(self, p):
        """expr : MINUS expr %prec UMINUS
                | NOT expr"""
        p[0] = A.UnaryOp(self._c(p, 1), p[1], p[2])

    def p_expr_postfix(self, p):
        """expr : postfix"""
        p[0] = p[1]

    def p_postfix_primary(self, p):
        """postfix : primary"""
        p[0] = p[1]

    def p_postfix_attr(self, p):
        """postfix : postfix DOT ID"""
        p[0] = A.Attr(self._c(p, 3), p[1], p[3])

    def p_postfix_method(self, p):
        """postfix : postfix DOT ID LPAREN args_opt RPAREN"""
        args, kwargs = p[5]
        p[0] = A.Call(self._c(p, 3), A.Attr(self._c(p, 3), p[1], p[3]), args, kwargs)

    def p_postfix_index(self, p):
        """postfix : postfix LBRACKET expr RBRACKET"""
        p[0] = A.Index(self._c(p, 2), p[1], p[3])

    def p_primary_name(self, p):
        """primary : ID"""
        p[0] = A.Name(self._c(p, 1), p[1])

    def p_primary_call(self, p):
        """primary : ID LPAREN args_opt RPAREN"""
        args, kwargs = p[3]
        p[0] = A.Call(self._c(p, 1), A.Name(self._c(p, 1), p[1]), args, kwargs)

    def p_primary_reduce(self, p):
        """primary : ID LPAREN ID IN expr COLON expr RPAREN"""
        p[0] = A.Reduce(self._c(p, 1), p[1], p[3], self._c(p, 3), p[5], p[7])

    def p_primary_int(self, p):
        """primary : INTLIT
                   | FLOATLIT"""
        p[0] = A.Num(self._c(p, 1), p[1])

    def p_primary_string(self, p):
        """primary : STRING"""
        p[0] = A.Str(self._c(p, 1), p[1])

    def p_primary_bool(self, p):
        """primary : TRUE
                   | FALSE"""
        p[0] = A.Bool(self._c(p, 1), p[1] == "true")

    def p_primary_paren(self, p):
        """primary : LPAREN expr RPAREN"""
        p[0] = p[2]

    def p_args_opt(self, p):
        """args_opt : args
                    | empty"""
        args = p[1] or []
        p[0] = ([a for a in args if not isinstance(a, A.Keyword)],
                [a for a in args if isinstance(a, A.Keyword)])
        self._check_arg_order(args)

    def p_args(self, p):
        """args : arg
                | args COMMA arg"""
        p[0] = _items(p, 3)

    def p_arg(self, p):
        """arg : expr
               | ID ASSIGN expr"""
        p[0] = p[1] if len(p) == 2 else A.Keyword(self._c(p, 1), p[1], p[3])

    def p_empty(self, p):
        """empty :"""
        p[0] = None

    def _check_arg_order(self, args):
        seen_kw = False
        for a in args:
            if isinstance(a, A.Keyword):
                seen_kw = True
            elif seen_kw:
                self.ctx.sink.error(a.coord, "positional argument after a keyword argument")
                return

    def p_error(self, tok):
        semicolon = self._missing_semicolon(tok)
        if semicolon is not None:
            return semicolon
        if tok is None:
            lines = self.ctx.text.split("\n")
            self.ctx.sink.error(A.Coord(self.ctx.filename, len(lines), len(lines[-1]) + 1),
                                "unexpected end of input" + _expected(self.parser) + self._unclosed())
            return
        what = L.TOKEN_TEXT.get(tok.type, tok.type)
        if tok.type in ("ID", "INTLIT", "FLOATLIT"):
            shown = show(str(tok.value))
        elif tok.type == "STRING":
            shown = "string " + show(tok.value)
        else:
            shown = f"'{what}'"
        self.ctx.sink.error(self.ctx.coord_at(tok.lexpos),
                            f"syntax error at {shown}" + _expected(self.parser))

    def _unclosed(self) -> str:
        """'; N '{' not closed, the last at LINE:COL' for an input that ends inside braces."""
        braces = self.feed.open_braces
        if not braces:
            return ""
        last = self.ctx.coord_at(braces[-1])
        count = "1 '{' is" if len(braces) == 1 else f"{len(braces)} '{{' are"
        return f"; {count} not closed, the last opened at line {last.line}, column {last.col}"

    def _missing_semicolon(self, tok):
        """A ';' token to parse on with, when `tok` starts a line or is a '}' after a statement that
        lacks its ';' (the error is reported at the end of that statement), else None.

        Only where ';' may come next and '{' may not: after `if (c)` a ';' would be an empty
        statement, not the fix.  Each token gets at most one ';' before it."""
        feed = self.feed
        if tok is None or len(feed.recent) < 2 or feed.recent[-1][0] is not tok:
            return None
        before, end = feed.recent[-2]
        actions = self.parser.action[self.parser.statestack[-1]]
        if (before.type in ("SEMI", "LBRACE", "RBRACE") or "SEMI" not in actions or "LBRACE" in actions
                or tok.lexpos in self.semicolons_inserted
                or (tok.type != "RBRACE"
                    and self.ctx.coord_at(tok.lexpos).line == self.ctx.coord_at(end - 1).line)):
            return None
        self.semicolons_inserted.add(tok.lexpos)
        self.ctx.sink.error(self.ctx.coord_at(end), "expected ';' at the end of this statement")
        semicolon = lex.LexToken()
        semicolon.type, semicolon.value, semicolon.lineno, semicolon.lexpos = "SEMI", ";", tok.lineno, end
        feed.again()
        self.parser.errok()
        return semicolon


def _expected(parser) -> str:
    """', expected X' when the parser state allows exactly one or two tokens."""
    try:
        state = parser.statestack[-1]
        names = [L.TOKEN_TEXT.get(t, t) for t in parser.action[state] if t not in ("error", "$end")]
    except (AttributeError, IndexError, KeyError):
        return ""
    if 1 <= len(names) <= 2:
        return ", expected " + " or ".join(f"'{n}'" for n in sorted(names))
    return ""


def _append(items: list, item) -> list:
    """Grow a list production in place: ``items + [item]`` would copy the list for every
    item, which is quadratic in the length of a block, an argument list and so on."""
    items.append(item)
    return items


def _items(p, nth):
    """``items : item | items [SEP] item``: the list so far with ``p[nth]`` appended."""
    return [p[1]] if len(p) == 2 else _append(p[1], p[nth])


def _body(stmt, coord):
    """The body of a compound statement as a Block (an erroneous body becomes empty)."""
    if stmt is None:
        return A.Block(coord, [])
    return stmt if isinstance(stmt, A.Block) else A.Block(stmt.coord, [stmt])


_GRAMMAR = None


def grammar() -> Grammar:
    global _GRAMMAR
    if _GRAMMAR is None:
        _GRAMMAR = Grammar()
    return _GRAMMAR


def parse(text: str, filename: str, sink):
    """Parse ``text``; errors go to ``sink``.  Returns a Module or None."""
    g = grammar()
    ctx = ParseContext(text, filename, sink)
    lexer = L.make_lexer(ctx)
    g.ctx, g.feed, g.semicolons_inserted = ctx, TokenFeed(lexer), set()
    try:
        return g.parser.parse(text, lexer=lexer, tokenfunc=g.feed.token)
    finally:
        g.ctx = g.feed = None
