"""Kerberos principals to ACL user names: Kafka's ``sasl.kerberos.principal.to.local.rules``.

A principal ``primary[/instance]@REALM`` becomes ``User:<short name>``; the short name is
the answer of the first rule that applies (Kafka's ``KerberosShortNamer``, Hadoop's
``auth_to_local`` syntax). The setting is a comma-separated list of rules:

* ``DEFAULT``: ``primary`` of a principal of the *default realm* (the broker's: the
  ``default_realm`` of its krb5.conf, else the realm of its keytab principal), for one
  or two components (``admin/laptop@EXAMPLE.COM`` is ``admin``); a principal of any
  other realm is not matched.
* ``RULE:[n:format](regex)s/from/to/g/L``: for principals of ``n`` components, the
  ``format`` with ``$0`` (the realm), ``$1``, ``$2`` (the components) replaced; the rule
  applies when ``regex`` matches that whole string; then ``s/from/to/`` replaces the
  first match of ``from`` (every match with ``g``; ``$1`` in ``to`` is a group of
  ``from``); ``/L`` or ``/U`` lower- or upper-cases the result. ``(regex)`` and
  ``s/.../.../`` may be left out.

A principal no rule applies to is refused: its authentication fails with ``No rules
apply to <principal>, rules [...]`` (as in Kafka). A result holding ``/`` or ``@`` is
refused too. A principal without a realm keeps its primary (Kafka).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidConfigError

#: Kafka's KerberosShortNamer.RULE_PARSER (the same groups)
_RULE = re.compile(r"((DEFAULT)|((RULE:\[(\d*):([^\]]*)](\(([^)]*)\))?"
                   r"(s/([^/]*)/([^/]*)/(g)?)?/?(L|U)?)))")
_NAME = re.compile(r"([^/@]*)(/([^/@]*))?@([^/@]*)")
_PARAMETER = re.compile(r"([^$]*)(\$(\d*))?")
_NON_SIMPLE = re.compile(r"[/@]")


class NoMatchingRule(Exception):
    """No rule maps the principal (its authentication fails with this message)."""


def _java_regex(text: str, rule: str) -> re.Pattern:
    try:
        return re.compile(text)
    except re.error as exc:
        raise InvalidConfigError(f"sasl.kerberos.principal.to.local.rules: rule {rule!r}: "
                                 f"bad regular expression {text!r} ({exc})") from None


def _java_replacement(template: str, match: re.Match) -> str:
    """``template`` expanded as Java's ``Matcher.replaceFirst`` does: ``$n`` is group
    n (more digits are taken while the group exists), ``\\x`` is ``x``."""
    out, i = [], 0
    while i < len(template):
        c = template[i]
        if c == "\\" and i + 1 < len(template):
            out.append(template[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(template) and template[i + 1].isdigit():
            number, i = int(template[i + 1]), i + 2
            while i < len(template) and template[i].isdigit() and \
                    number * 10 + int(template[i]) <= (match.re.groups or 0):
                number, i = number * 10 + int(template[i]), i + 1
            if number > (match.re.groups or 0):
                raise NoMatchingRule(f"no group {number} in {match.re.pattern!r}")
            out.append(match.group(number) or "")
        else:
            out.append(c)
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class KerberosRule:
    """One rule (module docstring); ``text`` is how it was written."""

    text: str
    default_realm: str
    is_default: bool = False
    components: int = 0
    format: str = ""
    match: re.Pattern | None = None
    from_pattern: re.Pattern | None = None
    to: str = ""
    repeat: bool = False
    lower: bool = False
    upper: bool = False

    def apply(self, params: list[str]) -> str | None:
        """The short name for ``[realm, primary, instance...]``, or None when the
        rule does not apply; NoMatchingRule for a result that is not a simple name."""
        result = None
        if self.is_default:
            if params[0] == self.default_realm:
                result = params[1]
        elif len(params) - 1 == self.components:
            base = self._parameters(params)
            if self.match is None or self.match.fullmatch(base):
                result = base
                if self.from_pattern is not None:
                    result = self.from_pattern.sub(
                        lambda m: _java_replacement(self.to, m), base,
                        count=0 if self.repeat else 1)
        if result is not None and _NON_SIMPLE.search(result):
            raise NoMatchingRule(f"Non-simple name {result} after auth_to_local rule "
                                 f"{self.text}")
        if result is not None and self.lower:
            result = result.lower()
        elif result is not None and self.upper:
            result = result.upper()
        return result

    def _parameters(self, params: list[str]) -> str:
        out, start = [], 0
        while start < len(self.format):
            m = _PARAMETER.match(self.format, start)
            if m is None:
                raise NoMatchingRule(f"bad format in username mapping in {self.format}")
            out.append(m.group(1))
            if m.group(2) is not None:
                if not m.group(3):
                    raise NoMatchingRule(f"bad format in username mapping in {self.format}")
                number = int(m.group(3))
                if number >= len(params):
                    raise NoMatchingRule(f"index {number} from {self.format} is outside of "
                                         f"the valid range 0 to {len(params) - 1}")
                out.append(params[number])
            start = m.end()
        return "".join(out)


class KerberosShortNamer:
    """The rules of ``sasl.kerberos.principal.to.local.rules`` (module docstring) with
    the broker's default realm."""

    def __init__(self, rules: list[KerberosRule]):
        self.rules = rules

    @classmethod
    def from_rules(cls, text: str, default_realm: str = "") -> "KerberosShortNamer":
        """Parse the setting (comma-separated rules); InvalidConfigError naming the rule
        that is not one."""
        rules = []
        for rule in (r.strip() for r in (text or "").split(",")):
            m = _RULE.match(rule)
            if not rule or m is None or m.end() != len(rule) or \
                    (m.group(2) is None and not m.group(5)):
                raise InvalidConfigError(
                    f"sasl.kerberos.principal.to.local.rules: {rule!r} is not a rule "
                    "(DEFAULT or RULE:[n:format](regex)s/from/to/g/L, comma-separated)"
                    + (f"; unmatched: {rule[m.end():]!r}" if m is not None and rule else ""))
            if m.group(2) is not None:
                rules.append(KerberosRule(rule, default_realm, is_default=True))
                continue
            rules.append(KerberosRule(
                rule, default_realm, components=int(m.group(5)), format=m.group(6),
                match=_java_regex(m.group(8), rule) if m.group(8) is not None else None,
                from_pattern=_java_regex(m.group(10), rule) if m.group(10) is not None
                else None,
                to=m.group(11) or "", repeat=m.group(12) == "g", lower=m.group(13) == "L",
                upper=m.group(13) == "U"))
        return cls(rules)

    def short_name(self, principal: str) -> str:
        """The user name of ``principal``; NoMatchingRule when no rule applies (or the
        name is malformed)."""
        m = _NAME.fullmatch(principal)
        if m is None:
            if "@" in principal:
                raise NoMatchingRule(f"Malformed Kerberos name: {principal}")
            return principal
        primary, instance, realm = m.group(1), m.group(3), m.group(4)
        params = [realm, primary] + ([instance] if instance is not None else [])
        for rule in self.rules:
            result = rule.apply(params)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {principal}, rules "
                             f"[{', '.join(r.text for r in self.rules)}]")


__all__ = ["KerberosRule", "KerberosShortNamer", "NoMatchingRule"]
