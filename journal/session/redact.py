"""Secrets taken out of text before a session leaves the machine (``journal export --format``).

A transcript exported as Markdown or HTML is made to be shared; the log under it often holds what
must not be: an API key a tool printed, a bearer token in a request it made, a private key it
read, a ``.env`` file it showed. ``redact`` replaces each match of the rules below with
``[REDACTED:<rule>]`` and counts what it replaced, so the export can say how much it took out.
The rules are listed in docs/CLI.md ("A session as a document"); ``--no-redact`` turns them
off. They look at text only: a secret split across two events, or encoded (base64 of a key), is
not found, which the docs say too.

Every rule is a regular expression whose matching time is linear in the text (no nested
quantifiers, bounded repeats), so a crafted log cannot make an export hang; a private key whose
END line never comes is redacted to the end of the text rather than left half shown.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PRIVATE_KEY_BYTES_MAX = 64 * 1024  # the longest PEM block looked for an END line in, in characters
# A variable or field name that says it holds a secret. Bounded on both sides, so a long line
# of identifier characters costs a bounded number of steps at each line start.
# (PWD is left out: the shell's working directory. AUTH counts only as a word of its own.)
SECRET_NAME = (r"[A-Za-z0-9_.\-]{0,64}(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?"
               r"|AUTH(?:ORIZATION)?(?![A-Za-z])|PRIVATE)[A-Za-z0-9_.\-]{0,64}")
SECRET_NAME_CHARS_MAX = 160
_SECRET_NAME_RE = re.compile(rf"^{SECRET_NAME}$", re.IGNORECASE)


@dataclass(frozen=True)
class Rule:
    name: str
    what: str  # one line, for the docs and --help
    pattern: re.Pattern[str]
    keep_group: int = 0  # a group kept as written before the redaction mark (a header name, a variable)


def _rule(name: str, what: str, pattern: str, keep_group: int = 0, flags: int = 0) -> Rule:
    return Rule(name, what, re.compile(pattern, flags), keep_group)


# Order matters where one secret could match two rules: the most specific first.
RULES: tuple[Rule, ...] = (
    _rule("private-key", "PEM private keys: -----BEGIN ... PRIVATE KEY----- to its END line",
          r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----"),
    _rule("anthropic-key", "Anthropic API keys (sk-ant-...)", r"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
    _rule("openai-key", "OpenAI-style API keys (sk-..., sk-proj-...)", r"\bsk-(?:proj-|svcacct-)?[A-Za-z0-9_\-]{20,}"),
    _rule("github-token", "GitHub tokens (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_)",
          r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
    _rule("aws-access-key", "AWS access key ids (AKIA..., ASIA...)", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    _rule("google-api-key", "Google API keys (AIza...)", r"\bAIza[0-9A-Za-z_\-]{35}"),
    _rule("slack-token", "Slack tokens (xoxb-, xoxp-, xoxa-, xoxr-, xoxs-)", r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    _rule("stripe-key", "Stripe secret and restricted keys (sk_live_, rk_live_, sk_test_)",
          r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    _rule("huggingface-token", "Hugging Face tokens (hf_...)", r"\bhf_[A-Za-z0-9]{30,}"),
    _rule("jwt", "JSON Web Tokens (three base64url parts, the first two starting eyJ)",
          r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    _rule("authorization", "the credentials of an Authorization header (Authorization: Basic ...)",
          r"""(\bAuthorization["']?[ \t]{0,4}[:=][ \t]{0,4}["']?(?:(?:Bearer|Basic|Token|Digest)[ \t]{1,4})?)"""
          r"""[^\s"',]{8,}""", 1, re.IGNORECASE),
    _rule("bearer-token", "bearer tokens (Bearer followed by 16 or more token characters)",
          r"(\bBearer[ \t]{1,4})[A-Za-z0-9\-._~+/]{16,}=*", 1, re.IGNORECASE),
    _rule("url-password", "the password in a URL's user:password@host",
          r"(\b[a-z][a-z0-9+.\-]{0,20}://[^\s:/@]{1,256}:)[^\s@/]{1,256}(?=@)", 1, re.IGNORECASE),
    _rule("env-assignment", ".env-style assignments of a secret-named variable (NAME=value, export NAME=value), "
          "at a line's start or after a space or a shell separator",
          rf"((?:^|(?<=[\s;&|(]))(?:export[ \t]+)?(?!authorization\b){SECRET_NAME}[ \t]{{0,4}}[=:][ \t]{{0,4}})"
          r"(?!\[REDACTED:)[^\s#]{1,4096}", 1,
          re.IGNORECASE | re.MULTILINE),
)

_END_KEY_RE = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----")


@dataclass
class Redactor:
    """Applies RULES, counting replacements per rule across every call (one export, one Redactor)."""

    enabled: bool = True

    def __post_init__(self) -> None:
        self.counts: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def text(self, s: str) -> str:
        if not self.enabled or not s:
            return s
        s = self._private_keys(s)
        for rule in RULES[1:]:
            s = rule.pattern.sub(lambda m, r=rule: self._mark(m, r), s)  # type: ignore[misc]
        return s

    def value(self, v: Any, depth: int = 0) -> Any:
        """A JSON value with every string redacted and every secret-named key's value replaced."""
        if not self.enabled:
            return v
        if isinstance(v, str):
            return self.text(v)
        if depth >= 64:  # deeper than any tool's arguments: shown as text, redacted as such
            return self.text(repr(v))
        if isinstance(v, Mapping):
            out: dict[Any, Any] = {}
            for k, item in v.items():
                if (isinstance(k, str) and len(k) <= SECRET_NAME_CHARS_MAX and _SECRET_NAME_RE.match(k)
                        and isinstance(item, str) and item):
                    self.counts["secret-field"] += 1
                    out[k] = "[REDACTED:secret-field]"
                else:
                    out[k] = self.value(item, depth + 1)
            return out
        if isinstance(v, list | tuple):
            return [self.value(item, depth + 1) for item in v]
        return v

    def _mark(self, m: re.Match[str], rule: Rule) -> str:
        self.counts[rule.name] += 1
        kept = m.group(rule.keep_group) if rule.keep_group else ""
        return f"{kept}[REDACTED:{rule.name}]"

    def _private_keys(self, s: str) -> str:
        begin = RULES[0].pattern
        out: list[str] = []
        at = 0
        while (m := begin.search(s, at)) is not None:
            out.append(s[at : m.start()])
            end = _END_KEY_RE.search(s, m.end(), min(len(s), m.end() + PRIVATE_KEY_BYTES_MAX))
            self.counts["private-key"] += 1
            out.append("[REDACTED:private-key]")
            at = end.end() if end is not None else len(s)
        out.append(s[at:])
        return "".join(out)


def rules_table() -> str:
    """The rules as the docs list them: one line each."""
    lines = [f"- `{r.name}`: {r.what}" for r in RULES]
    lines.append("- `secret-field`: a JSON field whose name says it holds a secret (api_key, token, password, "
                 "secret, credentials, auth, private...) in a tool's arguments or result")
    return "\n".join(lines)
