"""Research payloads (docs/event-payloads.md): the schema version, then the kind's struct in
postcard; and the JSON view of it."""

from .postcard import DecodeError, Reader

ENUMS = {
    "Mode": ["tool_constrained", "agent_led"],
    "SourceType": [
        "primary_data", "government", "academic_paper", "institutional_report",
        "news_original", "news_reprint", "blog", "social", "other",
    ],
    "Stance": ["supports", "opposes", "neutral"],
    "Side": ["supports", "opposes"],
    "RelevanceBasis": ["scored_by_source", "given_by_client", "idf_coverage", "topicality"],
    "ScreeningDecision": ["adopt", "reject"],
    "Tier": ["authority", "recency", "pending", "human", "weight"],
    "HumanOutcome": ["supports", "opposes", "both_stand"],
    "DecidedBy": ["person", "assistant"],
    "ConflictDecisions": ["person"],
    "EvidenceStatus": ["candidate", "adopted", "rejected", "retracted", "overruled"],
    "Verdict": ["supportive", "opposing", "uncertain", "evidence_insufficient"],
    "VerdictRule": [
        "no_side_taken", "below_confidence_floor", "pending_conflict", "supports_prevail",
        "opposes_prevail", "divided", "too_little_sided_evidence",
    ],
}

# A field is (name, type); a type is a primitive name, an enum or struct name, ("option", T) or
# ("list", T). A field whose name is in V2_PARTS[struct] is that struct's v2 part.
STRUCTS = {
    "Weights": [("relevance", "f64"), ("consistency", "f64"), ("recency", "f64"), ("diversity", "f64")],
    "AuthorityTable": [(n, "f64") for n in ENUMS["SourceType"]],
    "Thresholds": [
        ("authority_gap", "f64"), ("recency_gap_days", "f64"), ("consistency", "f64"),
        ("confidence_floor", "f64"), ("diversity_sources", "f64"),
    ],
    "V2Parameters": [
        ("query_weight", "f64"), ("coverage_full", "f64"), ("sided_items_min", "u64"),
        ("sided_relevance_min", "f64"), ("undated_recency", ("option", "f64")),
        ("side_weight_ratio", ("option", "f64")), ("query_cap", ("option", "f64")),
    ],
    "RuleSet": [
        ("id", "string"), ("weights", "Weights"), ("half_life_days", "f64"),
        ("authority", "AuthorityTable"), ("thresholds", "Thresholds"),
        ("v2", ("option", "V2Parameters")),
    ],
    "SubQuestion": [("id", "string"), ("text", "string")],
    "SearchHit": [
        ("result_id", "string"), ("origin", "string"), ("raw_score", "f64"),
        ("normalised_score", "f64"), ("evidence_id", "string"), ("folded", "bool"),
    ],
    "FoundBy": [("search_id", "string"), ("result_id", "string")],
    "TermInput": [
        ("term", "string"), ("doc_freq", "u64"), ("in_question", "bool"), ("in_query", "bool"),
        ("found", "bool"),
    ],
    "RelevanceInputs": [("corpus_docs", "u64"), ("terms", ("list", "TermInput"))],
    "Viewpoint": [
        ("scope", ("option", "string")), ("stance", "Stance"), ("evidence_ids", ("list", "string")),
        ("overruled_ids", ("list", "string")), ("sources", ("list", "string")),
        ("mean_relevance", "f64"), ("max_authority", "f64"), ("lead_evidence_id", "string"),
    ],
    "Participant": [
        ("evidence_id", "string"), ("side", "Side"), ("source", "string"),
        ("publish_date", "date"), ("authority", "f64"),
    ],
    "Compared": [
        ("supports_authority", "f64"), ("opposes_authority", "f64"), ("authority_gap", "f64"),
        ("supports_latest", "date"), ("opposes_latest", "date"), ("recency_gap_days", "i64"),
    ],
    "ComparedV2": [
        ("undated", ("list", "string")), ("supports_latest_dated", ("option", "date")),
        ("opposes_latest_dated", ("option", "date")), ("supports_weight", "f64"),
        ("opposes_weight", "f64"),
    ],
    "Adjudication": [
        ("conflict_id", "string"), ("scope", ("option", "string")),
        ("supersedes", ("option", "string")), ("participants", ("list", "Participant")),
        ("tier", "Tier"), ("winner", ("option", "Side")), ("compared", "Compared"),
        ("v2", ("option", "ComparedV2")),
    ],
    "MatrixRow": [
        ("evidence_id", "string"), ("source", "string"), ("source_type", "SourceType"),
        ("authority", "f64"), ("reliability", "f64"), ("relevance", "f64"), ("recency", "f64"),
        ("stance", ("option", "Stance")), ("status", "EvidenceStatus"),
    ],
    "StanceAggregate": [
        ("stance", "Stance"), ("items", "u64"), ("distinct_sources", "u64"),
        ("mean_relevance", "f64"), ("mean_recency", "f64"), ("mean_reliability", "f64"),
        ("max_authority", "f64"),
    ],
    "Components": [("relevance", "f64"), ("consistency", "f64"), ("recency", "f64"), ("diversity", "f64")],
    "StanceCounts": [("supports", "u64"), ("opposes", "u64"), ("neutral", "u64")],
    "UsedEvidence": [
        ("evidence_id", "string"), ("content_hash", "hash"), ("stance", "Stance"),
        ("source", "string"), ("origin", "string"),
    ],
    "UsedAdjudication": [
        ("conflict_id", "string"), ("tier", "Tier"), ("winner", ("option", "Side")),
        ("resolution", ("option", "HumanOutcome")),
    ],
    "ConclusionV2": [
        ("dated_items", "u64"), ("undated_items", "u64"), ("recency_measured", "bool"),
        ("weights_applied", "Weights"), ("supports_relevance", "f64"), ("opposes_relevance", "f64"),
    ],
    "Cite": [("seq", "u64"), ("version", "u64"), ("hash", "hash")],
    "Decider": [("by", "DecidedBy"), ("via", "string")],
    "ExplanationNode": [("parent", ("option", "u32")), ("text", "string"), ("cites", ("list", "Cite"))],
}

KINDS = {
    "task_opened": [
        ("task_id", "string"), ("question", "string"), ("constraints", ("list", "string")),
        ("research_date", "date"), ("mode", "Mode"), ("rules", "RuleSet"),
        ("conflict_decisions", ("option", "ConflictDecisions")),
    ],
    "sub_questions_expanded": [("sub_questions", ("list", "SubQuestion"))],
    "search_recorded": [
        ("search_id", "string"), ("query", "string"), ("sources", ("list", "string")),
        ("index_state", "string"), ("results", ("list", "SearchHit")),
    ],
    "evidence_added": [
        ("evidence_id", "string"), ("origin", "string"), ("source", "string"),
        ("url", ("option", "string")), ("publish_date", "date"), ("publish_date_defaulted", "bool"),
        ("source_type", "SourceType"), ("citation_count", ("option", "u64")), ("summary", "string"),
        ("content_hash", "hash"), ("relevance", "f64"), ("relevance_basis", "RelevanceBasis"),
        ("stance", ("option", "Stance")), ("sub_question", ("option", "string")),
        ("found_by", ("option", "FoundBy")), ("authority", "f64"), ("reliability", "f64"),
        ("age_days", "i64"), ("recency", "f64"),
        ("relevance_inputs", ("option", "RelevanceInputs")),
    ],
    "evidence_screened": [
        ("evidence_id", "string"), ("decision", "ScreeningDecision"), ("stance", ("option", "Stance")),
        ("sub_question", ("option", "string")), ("reason", "string"),
    ],
    "evidence_retracted": [("evidence_id", "string"), ("reason", "string")],
    "synthesis_recorded": [("synthesis_id", "string"), ("viewpoints", ("list", "Viewpoint"))],
    "conflicts_adjudicated": [
        ("adjudications", ("list", "Adjudication")), ("dissolved", ("list", "string")),
        ("unchanged", ("list", "string")),
    ],
    "conflict_resolved": [
        ("conflict_id", "string"), ("outcome", "HumanOutcome"), ("reason", "string"),
        ("previous_outcome", ("option", "HumanOutcome")), ("decided_by", ("option", "Decider")),
    ],
    "adjudication_appealed": [
        ("conflict_id", "string"), ("overturned_tier", "Tier"), ("overturned_winner", ("option", "Side")),
        ("outcome", "HumanOutcome"), ("reason", "string"), ("previous_outcome", ("option", "HumanOutcome")),
        ("decided_by", ("option", "Decider")),
    ],
    "decision_matrix_built": [
        ("matrix_id", "string"), ("rows", ("list", "MatrixRow")), ("aggregates", ("list", "StanceAggregate")),
    ],
    "conclusion_issued": [
        ("conclusion_id", "string"), ("stance", "Verdict"), ("rule", "VerdictRule"),
        ("confidence", "f64"), ("components", "Components"), ("counts", "StanceCounts"),
        ("distinct_sources", "u64"), ("evidence", ("list", "UsedEvidence")),
        ("adjudications", ("list", "UsedAdjudication")), ("rules", "RuleSet"),
        ("client_share", "f64"), ("supersedes", ("option", "string")),
        ("v2", ("option", "ConclusionV2")),
    ],
    "explanation_recorded": [
        ("explanation_id", "string"), ("conclusion_id", "string"), ("nodes", ("list", "ExplanationNode")),
    ],
    "external_tool_called": [
        ("tool", "string"), ("contract_version", "string"), ("arguments_hash", "hash"),
        ("reply_hash", ("option", "hash")), ("error", ("option", "string")),
    ],
    "task_closed": [("reason", ("option", "string"))],
}

# The v2 part of each struct that has one: its last field.
V2_PARTS = {
    "RuleSet": "v2",
    "evidence_added": "relevance_inputs",
    "Adjudication": "v2",
    "conclusion_issued": "v2",
}

# The parts schema version 3 added, who decided a conflict and who may decide a task's
# conflicts: present only in version 3 bytes.
V3_PARTS = {
    "task_opened": "conflict_decisions",
    "conflict_resolved": "decided_by",
    "adjudication_appealed": "decided_by",
}

# The part schema version 4 added, the cap on the query's part of v2 relevance: the last field of
# the v2 parameters, present only in version 4 bytes (which hold it, `some`, and nothing that an
# older version could have held).
V4_PARTS = {
    "V2Parameters": "query_cap",
}


def _date(text: str) -> str:
    parts = text.split("-")
    if (
        len(parts) != 3
        or not all(p.isdigit() for p in parts)
        or [len(p) for p in parts[1:]] != [2, 2]
        or len(parts[0]) < 4
    ):
        raise DecodeError(f"{text!r} is not a date")
    return text


class _Decoder:
    """Reads one payload; `version` is the schema version, which says whether v2 parts are
    there; `parts` collects, for each v2 part met, whether it was present."""

    def __init__(self, data: bytes, version: int):
        self.r = Reader(data)
        self.version = version
        self.parts: list[bool] = []
        self.parts3: list[bool] = []
        self.parts4: list[bool] = []

    def value(self, t):
        r = self.r
        if isinstance(t, tuple):
            if t[0] == "option":
                tag = r.take(1)[0]
                if tag == 0:
                    return None
                if tag != 1:
                    raise DecodeError("an option's tag is 0 or 1")
                return self.value(t[1])
            n = r.varint(64)
            if n > r.left():
                raise DecodeError("a list longer than the bytes left")
            return [self.value(t[1]) for _ in range(n)]
        if t in ("u64", "u32"):
            return r.varint(64 if t == "u64" else 32)
        if t == "i64":
            return r.zigzag()
        if t == "f64":
            return r.f64()
        if t == "bool":
            return r.boolean()
        if t == "string":
            return r.string()
        if t == "date":
            return _date(r.string())
        if t == "hash":
            return r.raw32().hex()
        if t in ENUMS:
            i = r.varint(32)
            if i >= len(ENUMS[t]):
                raise DecodeError(f"no variant {i} of {t}")
            return ENUMS[t][i]
        return self.struct(t, STRUCTS[t])

    def struct(self, name, fields):
        out = {}
        part = V2_PARTS.get(name)
        part3 = V3_PARTS.get(name)
        part4 = V4_PARTS.get(name)
        for field, t in fields:
            if field == part4:
                if self.version < 4:
                    continue
                value = self.value(t)
                self.parts4.append(value is not None)
                if value is not None:
                    out[field] = value
                continue
            if field == part3:
                if self.version < 3:
                    continue
                value = self.value(t)
                self.parts3.append(value is not None)
                if value is not None:
                    out[field] = value
                continue
            if field == part:
                if self.version == 1:
                    self.parts.append(False)
                    continue
                value = self.value(t)
                self.parts.append(value is not None)
                if value is not None:
                    out[field] = value
                continue
            out[field] = self.value(t)
        return out


def decode(kind: str, payload: bytes) -> dict:
    """The view of a payload: {"type": kind, …fields}. Raises DecodeError."""
    if kind not in KINDS:
        raise DecodeError(f"unknown event kind `{kind}`")
    if len(payload) < 2:
        raise DecodeError("event bytes too short for the schema version")
    version = int.from_bytes(payload[:2], "little")
    if version not in (1, 2, 3, 4):
        raise DecodeError(f"unknown event schema version {version}")
    d = _Decoder(payload[2:], version)
    view = d.struct(kind, KINDS[kind])
    if d.r.left():
        raise DecodeError(f"`{kind}` payload has {d.r.left()} trailing bytes")
    # Version 2 holds exactly the events with v2 parts, every part present.
    if version == 2 and (not d.parts or not all(d.parts)):
        raise DecodeError(f"`{kind}` payload is not in its canonical schema version")
    # Version 3 holds exactly the decisions that name who decided.
    if version == 3 and (not d.parts3 or not all(d.parts3)):
        raise DecodeError(f"`{kind}` payload is not in its canonical schema version")
    # Version 4 holds exactly the events whose rule set records a query cap, with every v2 part
    # present; who may decide a task's conflicts is an option there, present or not.
    if version == 4 and (not d.parts4 or not all(d.parts4) or not all(d.parts)):
        raise DecodeError(f"`{kind}` payload is not in its canonical schema version")
    return {"type": kind, **view}


def cited_content(kind: str, view: dict) -> list[str]:
    """The content blobs an event cites: an added item's full text."""
    if kind == "evidence_added":
        return [view["content_hash"]]
    return []
