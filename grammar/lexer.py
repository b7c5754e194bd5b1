"""PLY token definitions of the .mp language.

The lexer reports bad characters and unterminated strings/comments to the parse context
(``lexer.ctx``) and keeps going, so one typo does not hide later errors.  Columns are
computed from ``lexpos`` against the start of the token's line.
"""
from __future__ import annotations

import ply.lex as lex

from ..frontend.diagnostics import show

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


def t_block_comment(t):
    r"/\*(.|\n)*?\*/"
    t.lexer.lineno += t.value.count("\n")


def t_unterminated_comment(t):
    r"/\*(.|\n)*"
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


def t_FLOATLIT(t):
    r"(\d+\.\d*|\.\d+)([eE][+-]?\d+)?|\d+[eE][+-]?\d+"
    t.value = float(t.value)
    return t


def t_INTLIT(t):
    r"\d+"
    t.value = int(t.value)
    return t


def t_STRING(t):
    r'"([^"\\\n]|\\[^\n])*"'
    t.value = t.value[1:-1]      # kept verbatim: strings only ever select from fixed catalogues
    return t


def t_unterminated_string(t):
    r'"([^"\\\n,;)]|\\[^\n])*'
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


def t_error(t):
    ch = t.value[0]
    t.lexer.ctx.lex_error(t.lexpos, f"illegal character {show(ch)}")
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
