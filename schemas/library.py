"""Library access control (seed 003 §7): a library's policy (``policy:library:{id}``,
``LibraryAccessPolicy``), a redaction pattern (``RedactionPattern``, the five defaults with what the
PDF conversion damaged fixed), what one redaction did (``Redaction``), the access controller's answer
(``AccessDecision``) and one access's audit record (``access_log:{log_id}``, ``AccessLog``). No I/O."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator

from schemas._base import Id, Record, ShortText, Timestamp

__all__ = [
    "DEFAULT_PATTERNS",
    "AccessDecision",
    "AccessLog",
    "ApprovalRequirements",
    "AuditSettings",
    "LibraryAccessPolicy",
    "Redaction",
    "RedactionPattern",
    "RedactionRules",
    "RetrievalLimits",
]

Severity = Literal["low", "medium", "high"]
# a name in an allow or deny list: a role or model name, or "*"
Listed = Annotated[str, StringConstraints(pattern=r"^(\*|[A-Za-z0-9_.:/@*-]{1,128})$")]


class RedactionPattern(Record):
    pattern_id: Id
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    regex: Annotated[str, StringConstraints(min_length=1, max_length=2000)] = Field(
        description="an RE2 pattern (linear time; refused at load when RE2 cannot run it). A group named "
        "value (or value_<x>) narrows what is redacted to itself when it takes part (the rest of the match "
        "is context that stays); a match in which a group named keep (or keep_<x>) takes part is a "
        "look-alike and redacts nothing"
    )
    replacement: Annotated[str, StringConstraints(max_length=200)] = Field(
        description="what mask replaces a match with"
    )
    severity: Severity
    check: Literal["luhn", "phone", "iban"] | None = Field(
        None,
        description="a check the redacted value must also pass, which a regular expression cannot "
        "make: luhn (a card number's check digit), phone (9 to 17 digits), iban (an IBAN's mod-97 "
        "check digits, where the value is shaped like one)",
    )


# The spec's five, as the spec means them, and as people write the values. Its text lost to the PDF
# conversion: phone's "(?\d{3}?)?" (not a pattern at all: it meant an optional parenthesised area code),
# the JavaScript string escapes ("\b" there is a backspace). Measured on tests/redaction_corpus.py
# (scripts/bench_redaction.py prints recall and precision per pattern).
# - ssn: 3-2-4 digits with dashes, spaces or dots that an SSA could issue (no 000/666/9xx area, no 00
#   group, no 0000 serial); any nine digits right after "SSN", "social security (number)", "SS#".
# - credit_card: the issuers' prefixes (Visa, Mastercard, Amex, Discover, Diners, JCB, UnionPay) in
#   their groupings, any of space, dash, dot or none between groups, and a valid Luhn check digit;
#   numbers after "tracking", "order", "invoice" and the like are left alone.
# - email: local part and domain in any script (letters, marks and digits of every alphabet, IDN
#   domains), with subdomains and +tags; not image names like logo@2x.png or git@host: remotes.
# - phone: North American numbers with +1/1, a (555) or 555 area code and space, dot or dash
#   separators; + or 00 numbers in international form; national numbers with their trunk 0, split
#   (020 7946 0958, 01 23 45 67 89, 03-1234-5678, (02) 9876 5432); any 9 to 17 digits after a phone
#   word in a dozen languages (bare digits are as often ISBN-10s and Unix timestamps); not inside
#   ISBNs, card-shaped groups, longer dashed or dotted chains, or after an order or reference word.
# - account_number: after "account", "acct", "a/c", "Konto", "compte", "cuenta", "conto",
#   "rekening", "IBAN"... with "no.", "nr.", "number", "#", ":" in any order and case: 8 to 30
#   digits (single spaces or dashes between them), 12345-6, or an IBAN; an IBAN anywhere, its mod-97
#   check digits valid.
_SSN_AREA = r"(?:00[1-9]|0[1-9]\d|[1-578]\d{2}|6[0-57-9]\d|66[0-57-9])"
_SSN_GROUP = r"(?:0[1-9]|[1-9]\d)"
_SSN_SERIAL = r"(?:000[1-9]|00[1-9]\d|0[1-9]\d{2}|[1-9]\d{3})"
_CARD_SEP = r"(?:\s?[./\x{2013}-]\s?|\s)?"
_CARD_16 = r"(?:4\d{3}|5[1-5]\d{2}|2(?:2[2-9]\d|[3-6]\d{2}|7[01]\d|720)|6(?:011|5\d{2}|4[4-9]\d|2\d{2})|35\d{2})"
_NUMBER_WORDS = r"(?:\s*(?:no\.?|nbr\.?|num\.?|number|nr\.?|nummer|numéro|número|#|id|code|:))*"
# what an address's local part and a domain label are made of, in any script (RE2's \b is ASCII only:
# a character outside the local part's alphabet, or the start, comes before an address)
_MAIL_LOCAL = r"\pL\pM\pN._%+'-"
_MAIL_LABEL = r"[\pL\pM\pN](?:[\pL\pM\pN-]*[\pL\pM\pN])?"
# words that introduce a phone number, in the languages people write them
_PHONE_WORDS = (
    r"(?:\b(?:phone|tel|telephone|telefon|telefoon|telefono|telefone|fone|mobile?|mobil|cell|"
    r"handy|fax|call|ring|text|sms|ph|whatsapp|bel|anrufen(?:\s+unter)?|portable|telefonnummer|"
    r"rufnummer|handynummer|mobilnummer)\b|téléphone|"
    r"teléfono|móvil|movil|tél|電話|携帯(?:電話)?|手机|电话|फ़ोन|फोन)"
)
# words that introduce a reference number, which may look like a phone number
_REFERENCE = (
    r"\b(?:order|invoice|tracking|ref|reference|bestell\w*|auftrag\w*|rechnung\w*|commande|pedido|"
    r"ordine|referenz|sendung\w*|artikel\w*|article|sku|part|serial|batch|lot|charge\w*)"
)
# words that introduce a bank account, in the languages people write them
_ACCOUNT_WORDS = (
    r"\b(?:account[_-]?(?:number|num|nr|no)|account|acct|acc|a/c|konto(?:-?nummer|-?nr)?|kontonr|kto|compte|cuenta|conta(?:\s+corrente)?|"
    r"conto|rekening(?:nummer)?|iban)\b"
)
# an IBAN: country, check digits, 11 to 30 letters and digits, grouped by four or not (the iban check
# tests its mod-97 check digits)
_IBAN = r"(?-i:[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?)"
DEFAULT_PATTERNS: tuple[RedactionPattern, ...] = (
    RedactionPattern(
        pattern_id="ssn",
        name="Social Security Number",
        regex=(
            r"(?i)(?P<keep>\d+(?:[-.]\d+){3,})"
            r"|\b(?:ssn|social[ -]security(?:[ -]?(?:number|no\.?|#))?|ss#|soc\.?[ -]?sec\.?(?:[ -]?(?:number|no\.?|#))?)"
            r"[\s:#.-]*(?P<value>\d{3}(?: ?[-.] ?| )?\d{2}(?: ?[-.] ?| )?\d{4})\b"
            rf"|\b{_SSN_AREA}-{_SSN_GROUP}-{_SSN_SERIAL}\b"
            rf"|\b{_SSN_AREA} {_SSN_GROUP} {_SSN_SERIAL}\b"
            rf"|\b{_SSN_AREA}\.{_SSN_GROUP}\.{_SSN_SERIAL}\b"
        ),
        replacement="***-***-***",
        severity="high",
    ),
    RedactionPattern(
        pattern_id="credit_card",
        name="Credit Card",
        regex=(
            r"(?i)(?P<keep>\b(?:tracking|track|order|invoice|shipment|parcel|awb|ref|reference|isbn|imei|"
            rf"serial|sku|upc|ean|iccid|confirmation|booking|ticket){_NUMBER_WORDS}[\s:#.-]*\d[\d .-]{{11,30}}\d)"
            rf"|\b{_CARD_16}(?:{_CARD_SEP}\d{{4}}){{3}}\b"
            rf"|\b3[47]\d{{2}}{_CARD_SEP}\d{{6}}{_CARD_SEP}\d{{5}}\b"
            rf"|\b3(?:0[0-5]|[68]\d)\d{_CARD_SEP}\d{{6}}{_CARD_SEP}\d{{4}}\b"
        ),
        replacement="****-****-****-****",
        severity="high",
        check="luhn",
    ),
    RedactionPattern(
        pattern_id="email",
        name="Email Address",
        regex=(
            rf"(?:^|[^{_MAIL_LOCAL}])(?:(?P<keep>[\w.-]+@\d(?:\.\d)?x\.(?i:png|jpe?g|gif|svg|webp|avif)|"
            r"git@[\w.-]+:)"
            rf"|(?P<value>[{_MAIL_LOCAL}]+@{_MAIL_LABEL}(?:\.{_MAIL_LABEL})*\.[\pL\pM]{{2,}}))"
        ),
        replacement="***@**.***",
        severity="medium",
    ),
    RedactionPattern(
        pattern_id="phone",
        name="Phone Number",
        regex=(
            r"(?i)(?P<keep>\bisbn(?:-1[03])?:?\s*[\dx -]{10,17}|\d+(?:[-.]\d+){4,}"
            rf"|\b\d{{4}}[ -]\d{{4}}[ -]\d{{4}}[ -]\d{{1,4}}\b|{_REFERENCE}[\s:#.-]*\d[\d /.-]*\d)"
            rf"|{_PHONE_WORDS}{_NUMBER_WORDS}[\s:#.-]*(?P<value>\+?\(?\d[\d ()./-]{{6,20}}\d)"
            r"|(?:\+?1[ .-]?)?(?:\(\d{3}\)\s?|\b\d{3}\s?[ ./-]\s?)\d{3}[ .-]?\d{4}\b"
            r"|(?:^|[^\pL\pN])(?P<value_plus>\+[1-9]\d{0,2}(?:[ ./-]?\(?\d{1,5}\)?){1,6})\b"
            r"|(?:\(0\d{1,4}\)\s?\d{2,8}|\b00?[1-9]\d{0,4}[ ./-]\d{2,8})(?:[ ./-]?\d{2,8}){0,4}\b"
            r"|\(\d{2,5}\)\s?\d{3,5}(?:[ .-]?\d{2,5}){1,2}\b"
        ),
        replacement="***-***-***",
        severity="medium",
        check="phone",
    ),
    RedactionPattern(
        pattern_id="account_number",
        name="Bank Account",
        regex=(
            rf"(?i)(?:\b(?:numéro|número|numero|n°|nº|no\.?)\s+(?:de|di|del)\s+)?{_ACCOUNT_WORDS}\.?"
            r"(?:\s*(?:no\.?|nr\.?|nbr\.?|num\.?|number|nummer|numéro|número|numero|n°|nº|#|:|=|-))*\s*"
            rf"(?P<value>{_IBAN}|\d(?:[ -]?\d){{7,29}}|\d{{4,12}}-\d)\b"
            rf"|\b(?P<value_iban>{_IBAN})\b"
        ),
        replacement="Account: *****",
        severity="high",
        check="iban",
    ),
)


class RetrievalLimits(Record):
    max_chunks_per_query: int = Field(20, ge=1, le=1000)
    max_queries_per_run: int = Field(10, ge=0, le=100_000)
    max_queries_per_user_daily: int = Field(100, ge=0, le=10_000_000)


class RedactionRules(Record):
    pii_detection: bool = True
    custom_patterns: list[RedactionPattern | Id] = Field(
        default_factory=list,
        description="patterns, or the id of a default one (ssn, credit_card, email, phone, "
        "account_number); with pii_detection and none listed, the five defaults",
    )
    redaction_method: Literal["mask", "remove", "hash"] = "mask"


class AuditSettings(Record):
    log_all_access: bool = True
    require_justification: bool = False
    retention_days: int = Field(90, ge=1, le=36_500)


class ApprovalRequirements(Record):
    cloud_escalation: bool = False
    export_to_artifact: bool = False
    cross_library_joins: bool = False


class LibraryAccessPolicy(Record):
    """``policy:library:{library_id}``: every field of the spec's LibraryAccessPolicy."""

    library_id: Id
    library_name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    sensitivity: Literal["public", "private", "restricted", "confidential"]
    allowed_agents: list[Listed] = Field(default_factory=list)
    denied_agents: list[Listed] = Field(default_factory=list)
    cloud_models_allowed: bool = False
    allowed_models: list[Listed] = Field(default_factory=lambda: ["*"])
    denied_models: list[Listed] = Field(default_factory=list)
    retrieval_limits: RetrievalLimits = Field(default_factory=RetrievalLimits)
    redaction_rules: RedactionRules = Field(default_factory=RedactionRules)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    require_approval_for: ApprovalRequirements = Field(default_factory=ApprovalRequirements)

    @field_validator("denied_models")
    @classmethod
    def _no_substring_rules(cls, value: list[str]) -> list[str]:
        for name in value:
            if name.startswith("*-") or name.endswith("-*"):
                raise ValueError(
                    f"{name!r}: cloud models are named by the catalogue's `cloud` flag "
                    "(cloud_models_allowed: false), not by a part of their name"
                )
        return value


class Redaction(Record):
    """One redaction: which pattern, where in the original text, how long, how severe."""

    pattern_id: Id
    original_position: int = Field(ge=0)
    original_length: int = Field(ge=1)
    severity: Severity


class AccessDecision(Record):
    allowed: bool
    reason: Literal["policyViolation", "rateLimitExceeded", "noJustification"] | None = None
    details: ShortText = ""
    policy_applied: Id | None = None


class AccessLog(Record):
    """``access_log:{log_id}``: every field of the spec's AccessLog."""

    log_id: Id
    timestamp: Timestamp
    timestamp_ms: int = Field(ge=0, description="for range queries (idx:access_logs)")
    run_id: Id
    user_id: Id
    agent_role: Id
    library_id: Id
    document_ids: list[str] = Field(default_factory=list)
    chunk_ids: list[str] = Field(default_factory=list)
    query: Annotated[str, StringConstraints(max_length=4000)]
    model_id: str
    retrieval_count: int = Field(0, ge=0)
    justification: ShortText | None = None
    redactions_applied: int = Field(0, ge=0)
    access_granted: bool
    policy_violations: list[ShortText] = Field(default_factory=list)
