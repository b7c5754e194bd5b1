"""PLY token definitions of the .mp language.

The lexer reports bad characters and unterminated strings/comments to the parse context
(``lexer.ctx``) and keeps going, so one typo does not hide later errors.  Columns are
computed from ``lexpos`` against the start of the token's line.
"""
from __future__ import annotations

import math

import ply.lex as lex

from .diagnostics import show

# Integer literals are C int64 values (compile-time arithmetic follows C).  The bound is checked
# on the digits before int() sees them: int() refuses strings of over 4300 digits.
INT_MAX = 2 ** 63 - 1

KEYWORDS = {
    "function": "FUNCTION", "Graph": "GRAPH", "propNode": "PROPNODE", "propEdge": "PROPEDGE",
    "weight": "WEIGHT", "int": "INT", "float": "FLOAT", "bool": "BOOL", "for": "FOR",
    "forall": "FORALL", "in": "IN", "if": "IF", "else": "ELSE", "while": "WHILE",
    "true": "TRUE", "false": "FALSE",
}

tokens = (
    "ID", "INTLIT", "FLOATLIT", "STRING",
    "LPAREN", "RPAREN", "LBRACE", "RBRACE", "LBRACKET", "RBRACKET", "SEMI", "COMMA", "DOT",
    "COLON", "LT", "GT", "LE", "GE", "EQ", "NE", "ASSIGN", "PLUSEQ", "MINUSEQ", "TIMESEQ",
    "DIVEQ", "INC", "DEC", "PLUS", "MINUS", "TIMES", "DIVIDE", "MOD", "AND", "OR", "NOT",
) + tuple(KEYWORDS.values())

# Longer operators are listed as functions below so PLY tries them before the 1-char ones.
t_LPAREN = r"\("
t_RPAREN = r"\)"
t_LBRACE = r"\{"
t_RBRACE = r"\}"
t_LBRACKET = r"\["
t_RBRACKET = r"\]"
t_SEMI = r";"
t_COMMA = r","
t_DOT = r"\."
t_COLON = r":"
t_LT = r"<"
t_GT = r">"
t_ASSIGN = r"="
t_PLUS = r"\+"
t_MINUS = r"-"
t_TIMES = r"\*"
t_DIVIDE = r"/"
t_MOD = r"%"
t_NOT = r"!"

t_ignore = " \t\r\f\v"

TOKEN_TEXT = {
    "LPAREN": "(", "RPAREN": ")", "LBRACE": "{", "RBRACE": "}", "LBRACKET": "[", "RBRACKET": "]",
    "SEMI": ";", "COMMA": ",", "DOT": ".", "COLON": ":", "LT": "<", "GT": ">", "LE": "<=",
    "GE": ">=", "EQ": "==", "NE": "!=", "ASSIGN": "=", "PLUSEQ": "+=", "MINUSEQ": "-=",
    "TIMESEQ": "*=", "DIVEQ": "/=", "INC": "++", "DEC": "--", "PLUS": "+", "MINUS": "-",
    "TIMES": "*", "DIVIDE": "/", "MOD": "%", "AND": "&&", "OR": "||", "NOT": "!",
    "ID": "identifier", "INTLIT": "integer", "FLOATLIT": "number", "STRING": "string",
    **{v: k for k, v in KEYWORDS.items()},
}


# Long comments and strings are matched by repeating character classes, not groups: Python's
# regex engine keeps backtracking state for every repetition of a group such as (a|b)*, about
# 1 KB per character (a 1 MB string literal took 1 GB).
def t_block_comment(t):
    r"/\*[\s\S]*?\*/"
    t.lexer.lineno += t.value.count("\n")


def t_unterminated_comment(t):
    r"/\*[\s\S]*"
    t.lexer.ctx.lex_error(t.lexpos, "unterminated comment")
    t.lexer.lineno += t.value.count("\n")


def t_line_comment(t):
    r"//[^\n]*"


def t_newline(t):
    r"\n+"
    t.lexer.lineno += len(t.value)


def t_LE(t):
    r"<="
    return t


def t_GE(t):
    r">="
    return t


def t_EQ(t):
    r"=="
    return t


def t_NE(t):
    r"!="
    return t


def t_PLUSEQ(t):
    r"\+="
    return t


def t_MINUSEQ(t):
    r"-="
    return t


def t_TIMESEQ(t):
    r"\*="
    return t


def t_DIVEQ(t):
    r"/="
    return t


def t_INC(t):
    r"\+\+"
    return t


def t_DEC(t):
    r"--"
    return t


def t_AND(t):
    r"&&"
    return t


def t_OR(t):
    r"\|\|"
    return t


# Digits are [0-9], not \d: \d would also accept other scripts' digits ('\u0663').
def t_FLOATLIT(t):
    r"([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
    t.value = float(t.value)
    if math.isinf(t.value):
        t.lexer.ctx.lex_error(t.lexpos, "float literal too large")
        t.value = 0.0          # the program is not lowered after a lexical error
    return t


def t_INTLIT(t):
    r"[0-9]+"
    digits = t.value.lstrip("0") or "0"
    if len(t.value) > 1 and t.value[0] == "0":
        # C, whose arithmetic the language follows, reads 010 as octal 8: refused, not guessed
        t.lexer.ctx.lex_error(t.lexpos, f"an integer literal may not start with 0 ({show(t.value)}): "
                                        f"write it without the leading zeros (octal literals are not supported)")
    if len(digits) > len(str(INT_MAX)) or int(digits) > INT_MAX:
        t.lexer.ctx.lex_error(t.lexpos, "integer literal too large")
        t.value = 0            # the program is not lowered after a lexical error
    else:
        t.value = int(digits)
    return t


def t_STRING(t):
    r'"[^"\\\n]*(?:\\[^\n][^"\\\n]*)*"'
    t.value = t.value[1:-1]      # kept verbatim: strings only ever select from fixed catalogues
    return t


def t_unterminated_string(t):
    r'"[^"\\\n,;)]*(?:\\[^\n][^"\\\n,;)]*)*'
    # Most likely the closing quote was forgotten before the next delimiter: end the string
    # there so that the rest of the line still parses and reports nothing spurious.
    t.lexer.ctx.lex_error(t.lexpos, "unterminated string literal")
    t.type = "STRING"
    t.value = t.value[1:]
    return t


def t_ID(t):
    r"[A-Za-z_][A-Za-z0-9_]*"
    t.type = KEYWORDS.get(t.value, "ID")
    return t


def t_illegal(t):
    r'(?:[^A-Za-z0-9_ \t\r\f\v\n(){}\[\];,.:<>=!+\-*/%&|"]+|&(?!&)|\|(?!\|))+'
    # A run of characters that cannot start any token is one diagnostic, not one per
    # character.  This rule (rather than t_error) also keeps lexing linear: PLY hands t_error
    # a copy of the whole rest of the input.
    run = t.value
    if len(run) == 1:
        t.lexer.ctx.lex_error(t.lexpos, f"illegal character {show(run)}")
    else:
        t.lexer.ctx.lex_error(t.lexpos, f"{len(run)} illegal characters {show(run)}")


def t_error(t):
    # Unreachable while t_illegal covers every character no other rule accepts; kept as a
    # safety net.
    t.lexer.ctx.lex_error(t.lexpos, f"illegal character {show(t.value[0])}")
    t.lexer.skip(1)


_MASTER = None


def make_lexer(ctx):
    """A fresh lexer bound to a parse context (the master is built once per process)."""
    global _MASTER
    if _MASTER is None:
        import sys
        _MASTER = lex.lex(module=sys.modules[__name__], optimize=False, debug=False,
                          errorlog=lex.NullLogger())
    lexer = _MASTER.clone()
    lexer.lineno = 1
    lexer.ctx = ctx
    return lexer
