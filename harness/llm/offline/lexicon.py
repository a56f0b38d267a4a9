"""The offline analyst's vocabulary: general SRE language in English and Chinese.

Nothing here names a particular incident, service or scenario. It is the vocabulary any
on-call engineer reads logs with: words that describe a resource running out or a component
failing (cause-like), words that describe what users feel (symptom-like), a small bilingual
glossary so a Chinese question can be matched with English logs, and a crude stemmer.
"""

from __future__ import annotations

import functools
import re

from harness.text import content_tokens, has_cjk

_SUFFIXES = ("ations", "ation", "ions", "ion", "ings", "ing", "ness", "ed", "es", "s")


#: words a stem does not bring together: "never becomes Ready" is about the readiness probe
_SAME_STEM = {"ready": "readi", "unready": "readi", "notready": "readi"}


def stem(token: str) -> str:
    if not token.isascii():
        return token
    if token in _SAME_STEM:
        return _SAME_STEM[token]
    for suffix in _SUFFIXES:
        if token.endswith(suffix) and len(token) - len(suffix) >= 4:
            return token[: -len(suffix)]
    return token


# Chinese term -> English terms found in logs and documents.
GLOSSARY: dict[str, tuple[str, ...]] = {
    "支付": ("payment", "pay"), "付款": ("payment", "pay"), "订单": ("order",), "下单": ("order", "checkout"),
    "结算": ("checkout",), "超时": ("timeout", "timed"), "连接池": ("pool", "connection"),
    "连接": ("connection",), "数据库": ("database", "db", "mysql", "sql"), "缓存": ("cache", "redis"),
    "磁盘": ("disk", "space"), "空间": ("space",), "证书": ("certificate", "cert", "tls", "ssl"),
    "过期": ("expired", "expiry"), "内存": ("memory", "oom", "heap"), "慢": ("slow", "latency"),
    "延迟": ("latency", "slow", "lag"), "错误": ("error",), "报错": ("error", "exception"),
    "失败": ("fail", "failed", "failure"), "异常": ("exception", "error"), "登录": ("login", "auth"),
    "认证": ("auth", "authentication"), "网关": ("gateway",), "部署": ("deploy", "deployment"),
    "发布": ("release", "deploy", "rollout"), "上线": ("release", "deploy"), "配置": ("config", "configuration"),
    "变更": ("change", "changed"), "队列": ("queue",), "消息": ("message",), "库存": ("inventory", "stock"),
    "用户": ("user",), "接口": ("api", "endpoint"), "查询": ("query",), "索引": ("index",), "锁": ("lock",),
    "死锁": ("deadlock",), "重启": ("restart",), "崩溃": ("crash",), "不可用": ("unavailable",),
    "拒绝": ("refused", "rejected"), "限流": ("throttle", "rate", "limit"), "线程": ("thread",),
    "网络": ("network",), "域名": ("dns", "domain"), "解析": ("resolve", "dns"), "满": ("full",),
    "耗尽": ("exhausted",), "泄漏": ("leak",), "击穿": ("stampede", "miss"), "雪崩": ("stampede", "avalanche"),
    "命中": ("hit",), "主从": ("replication", "replica"), "复制": ("replication",), "磁盘满": ("disk", "full"),
    "搜索": ("search",), "通知": ("notification",), "邮件": ("email", "mail", "smtp"),
    "商品": ("product", "item", "catalog"), "详情": ("detail",), "页面": ("page",), "运单": ("waybill", "shipment"),
    "会员": ("member", "membership"), "续费": ("renewal", "renew"), "短信": ("sms",), "验证码": ("otp", "code"),
    "容器": ("container", "pod"), "节点": ("node",), "镜像": ("image",), "探针": ("probe",), "就绪": ("ready", "readiness"),
    "存活": ("liveness",), "调度": ("schedule", "scheduling"), "密钥": ("secret", "key"), "环境变量": ("env", "environment"),
}  # fmt: skip

#: Words that describe a cause: something ran out, broke, expired or was refused.
CAUSE_TERMS = frozenset(
    stem(w)
    for w in [
        "exhausted",
        "exhaustion",
        "pool",
        "limit",
        "max",
        "maximum",
        "quota",
        "capacity",
        "full",
        "space",
        "oom",
        "memory",
        "killed",
        "expired",
        "expiry",
        "invalid",
        "refused",
        "unreachable",
        "deadlock",
        "lock",
        "saturated",
        "throttled",
        "backlog",
        "evicted",
        "eviction",
        "miss",
        "stampede",
        "scan",
        "lag",
        "leak",
        "overflow",
        "rejected",
        "acquire",
        "available",
        "unavailable",
        "denied",
        "forbidden",
        "unauthorized",
        "dns",
        "resolve",
        "handshake",
        "disk",
        "inode",
        "crash",
        "panic",
        "segfault",
        "restart",
        "corrupt",
        "mismatch",
        "misconfigured",
        "missing",
        "blocked",
        "contended",  # not "contention": this stemmer makes that "content"
        "starvation",
        "degraded",
        "unhealthy",
        "down",
        "offline",
    ]
)

#: Words that describe a symptom: what users and callers experience.
SYMPTOM_TERMS = frozenset(
    stem(w)
    for w in [
        "timeout",
        "timed",
        "latency",
        "slow",
        "5xx",
        "500",
        "502",
        "503",
        "504",
        "gateway",
        "retry",
        "retrying",
        "failed",
        "error",
        "errors",
        "upstream",
        "request",
        "response",
        "p99",
        "elevated",
    ]
)

#: What an orchestrator or a retry loop says when a workload keeps failing: it restarts it,
#: backs off, gives up. These restate the failure; its reason is in what the workload itself
#: said before (or in the state the orchestrator recorded), so they are never the cause.
RESTATEMENT = re.compile(
    r"back-?off\s+restarting|restarting\s+failed\s+container|crash\s*loop(ing|\s*back-?off)?|"
    r"backoff\s*limit\s*exceeded|reached\s+the\s+specified\s+backoff\s+limit|too\s+many\s+restarts|"
    r"\bcontainer\s+\S+\s+(restarted|exited|terminated)\b|"
    # a mount that waited in vain: its reason is in the attach or mount event beside it
    r"(?:failed\s*mount:\s*)?unable\s+to\s+(?:attach\s+or\s+)?mount\s+volumes:.*?timed\s+out\s+waiting\s+for\s+the\s+condition|"
    # an access log's line for a failed request: the symptom as the proxy saw it
    r"\bHTTP/[\d.]+\"\s+[45]\d\d\b",
    re.IGNORECASE,
)
#: What an orchestrator says when it knows why a workload is down: the diagnosis itself, not a
#: restatement (Kubernetes' event reasons and container states, in their usual words).
ORCHESTRATOR_DIAGNOSIS = re.compile(
    r"\boom\s*kill(ed|ing)?\b|\bout\s+of\s+memory\b|\bexit\s*code[:=\s]+137\b|"
    r"\b(err)?image\s*pull(back-?off)?\b|\bfailed\s+to\s+pull\s+image\b|back-?off\s+pulling\s+image|"
    r"\bmanifest\s+unknown\b|\b(readiness|liveness|startup)\s+probe\s+(failed|errored)\b|"
    r"\bfailed\s*scheduling\b|\binsufficient\s+(cpu|memory|ephemeral-storage|pods)\b|"
    r"\b\d+/\d+\s+nodes\s+are\s+available\b|\bfailed\s*(mount|attach\s*volume)\b|"
    r"\bunable\s+to\s+(attach\s+or\s+)?mount\b|\bevicted\b|\bnode\s+was\s+low\s+on\s+resource\b|"
    r"\b(disk|memory|pid)\s*pressure\b|\bcreate\s*container\s*config\s*error\b|"
    r"\bcouldn'?t\s+find\s+key\b|\b(configmaps?|secrets?)\s+\"?[\w.-]+\"?\s+not\s+found\b|"
    r"\bunbound\s+(immediate\s+)?persistent\s*volume\s*claims?\b|\bpersistent\s*volume\s*claim\s+\"?[\w.-]+\"?\s+not\s+found\b|"
    r"\bwould\s+violate\s+the\s+pod'?s\s+disruption\s+budget\b",
    re.IGNORECASE,
)
#: a server inside a container that listens on its loopback address only: whatever connects to
#: the pod's address (a probe, a service) is refused
LOOPBACK_LISTEN = re.compile(
    r"\blisten(?:ing)?\s+(?:on|at)\s+(?:\w+://)?(?:127\.0\.0\.1|localhost|\[::1\])(?![\d.])", re.IGNORECASE
)
#: What a program or server says when it knows why it cannot go on: the operating system's error
#: messages (``strerror``) and a server's own limits. Such a line states its reason, as an
#: orchestrator's diagnosis does; "Too Many Requests" does not (it is a limiter's symptom).
#: a server at a limit of its own, on how many, how big or how much: what it then refuses
SERVER_LIMIT = re.compile(
    r"\btoo\s+many\s+(?:clients|connections)\b|\bremaining\s+connection\s+slots\s+are\s+reserved\b|"
    # ("Too many parts", "maximum payload exceeded"); not a rate limiter's "Too Many Requests",
    # which is its symptom
    r"\btoo\s+many\s+(?!requests?\b|retries\b|restarts\b)[a-z]{3,}\b|"
    r"\bmaximum\s+(?:payload|message\s+size|packet\s+size|request\s+size)\s+exceeded\b|\bpayload\s+too\s+large\b|"
    r"\b(?:message|payload|request|response|packet|frame)\s+(?:is\s+)?larger\s+than\s+(?:the\s+)?max(?:imum)?\b|"
    # a broker's own limit on how long a delivery may go unacknowledged (RabbitMQ's consumer_timeout)
    r"\bdelivery\s+acknowledge?ment\s+(?:on\s+channel\s+\S+\s+)?timed\s+out\b|"
    # a header bigger than the proxy's buffer or the server's limit for it
    r"\btoo\s+big\s+header\b|\bheaders?\s+(?:is\s+|are\s+)?too\s+(?:large|big|long)\b|\bheader\s+or\s+cookie\s+too\s+large\b|"
    r"\bdisk\s+quota\s+exceeded\b|"
    # a store or a table that is full, a limit or an alarm that was reached: what it then refuses
    r"\b(?:table|queue|buffer|disk|volume|partition|database|backlog)\s+(?:is\s+)?full\b|"
    r"\b(?:memory|disk)\s+(?:resource\s+)?(?:limit\s+)?alarm\b|\bwatermark\b[^.;]{0,80}?\bexceeded\b|"
    r"\b(?:database\s+|storage\s+)?space\s+exceeded\b|\bquota\s+(?:exceeded|reached)\b|"
    r"\b(?:memory|connections?|files?|process(?:es)?|size|storage)\s+limit\s+(?:exceeded|reached)\b|"
    # a limit of so many (series, searchers, shards) that was exceeded; not a rate or a time limit
    r"\b(?!(?:rate|time)\b)[a-z]{3,}\s+limit\s+of\s+\S+\s+(?:exceeded|reached)\b|\bexceeded\s+(?:the\s+)?limit\s+of\b|"
    # a server at the limit a setting of its own puts on it ("server reached pm.max_children setting")
    r"\breached\s+(?:the\s+|its\s+)?(?:[a-z_.]*max[a-z_.]*\s+setting|max(?:imum)?\s+number\s+of\s+\w+)\b|"
    r"\bexceeded\s+(?:its\s+|the\s+)?quota\b|\bmaxmemory\b",
    re.IGNORECASE,
)
STATED_REASON = re.compile(
    r"\bexec\s+format\s+error\b|\bno\s+space\s+left\s+on\s+device\b|\bread-only\s+file\s*system\b|"
    r"\bcannot\s+allocate\s+memory\b|\btoo\s+many\s+open\s+files\b|\baddress\s+already\s+in\s+use\b|"
    r"\bpermission\s+denied\b|\boperation\s+not\s+permitted\b|\bno\s+such\s+file\s+or\s+directory\b|"
    # a secrets store that cannot decrypt what it holds until it is unsealed
    r"\b(?:vault\s+|server\s+|store\s+)?is\s+sealed\b|"
    r"\bcertificate\s+(?:has\s+)?expired\b|"
    # a name that does not resolve, as resolvers and the programs asking them say it
    r"\bhost\s+not\s+found\b|\bno\s+such\s+host\b|\bname\s+or\s+service\s+not\s+known\b|\bnxdomain\b|"
    r"\bcould\s+not\s+resolve\s+host\b|\btemporary\s+failure\s+in\s+name\s+resolution\b|\bEAI_AGAIN\b|"
    # the kernel refusing a process more of something it is limited to
    r"\bfork\s+rejected\b|\bpids\s+controller\b|"
    # what a TLS library says when it does not trust the other end
    r"\bcertificate\s+signed\s+by\s+unknown\s+authority\b|\bcertificate\s+verify\s+failed\b|"
    r"\bself[- ]signed\s+certificate\b|\bcertificate\s+is\s+not\s+valid\s+for\b|\bunknown\s+ca\b|"
    # a setting or a field the program needs and was not given
    r"\bmissing\s+(?:required\s+)?(?:request|limit|field|key|value|setting|config(?:uration)?|parameter|"
    r"argument|header|secret|permission|scope|role|column|table|index|file)s?\b|"
    r"\b(?:environment\s+variable|variable|setting|option|parameter|password|key)\s+\S+\s+is\s+"
    r"(?:not\s+(?:set|specified|defined)|undefined)\b|\bmust\s+(?:specify|set|provide)\b|"
    # a pool that lent a connection nobody gave back (HikariCP's leak detection)
    r"\bconnection\s+leak\b|"
    # a credential the other end no longer accepts for its age
    r"\b(?:client\s+)?secret(?:\s+keys?)?\s+(?:for\s+(?:\S+\s+){1,3}?)?(?:are|is|has|have)\s+(?:been\s+)?expired\b|"
    r"\b(?:password|credentials?)\s+(?:has\s+|have\s+)?expired\b|"
    # a service with no pod behind it
    r"\bdoes\s+not\s+have\s+any\s+active\s+endpoints?\b|\bno\s+endpoints\s+available\b|"
    r"\bdropp(?:ing|ed)\s+(?:packets?|messages?|connections?)\b|"
    + SERVER_LIMIT.pattern
    + "|"
    + LOOPBACK_LISTEN.pattern,
    re.IGNORECASE,
)
#: a reason in the orchestrator's words or the system's, whichever the text states
ANY_REASON = re.compile(f"{ORCHESTRATOR_DIAGNOSIS.pattern}|{STATED_REASON.pattern}", re.IGNORECASE)
#: a message that names the setting its failure is about ("longer than the configured
#: max.poll.interval.ms", "bigger than 'max_allowed_packet'"): where a long message says why
SETTING_NAMED = re.compile(
    r"\b(?:configured|than|exceeds?|exceeded|increas(?:e|ing)|rais(?:e|ing)|reduc(?:e|ing))\s+(?:the\s+)?['\"`]?"
    r"[a-z][a-z0-9]*(?:[._][a-z0-9]+){1,}\b",
    re.IGNORECASE,
)
#: a program passing over one item of its input and going on ("Skipping outbox row 963: unknown
#: event type", "ignoring event with unknown schema version"): input it handled, not a failure
HANDLED_INPUT = re.compile(
    r"\b(?:skipp(?:ing|ed)|ignor(?:ing|ed)|discard(?:ing|ed)|dropp(?:ing|ed))\s+"
    r"(?:(?:an?|the|this|outbox|inbox|queued|unknown|invalid|malformed|duplicate|stale|late|empty)\s+){0,2}"
    r"(?:rows?|events?|records?|items?|entr(?:y|ies)|notifications?|updates?|payloads?|documents?|"
    r"spans?|metrics?|samples?|lines?)\b",
    re.IGNORECASE,
)
#: a failure that is only a wait that ran out ("context deadline exceeded", "timed out"): the way
#: any slowness or loss shows, which says nothing of its reason
TIMED_OUT = re.compile(
    r"\btimed?\s*out\b|\btimeout\b|\bdeadline\s+exceeded\b|\bawaiting\s+headers\b|"
    r"\b(?:session|heartbeat|lease)\s+(?:has\s+)?expired\b|\b(?:session|lease)\s+expiration\b|"
    r"\bexpiring\s+(?:session|lease)\b|\bexceeded\s+(?:the\s+)?(?:session\s+)?timeout\b",
    re.IGNORECASE,
)
#: How a team's document says that something it lists is not a problem ("Known noise: …",
#: "harmless", "can be ignored"): what it names is no cause.
NOISE_CUE = re.compile(
    r"\bknown\s+noise\b|\bnoise\s*:|\bharmless\b|\bbenign\b|\bcan\s+(?:safely\s+)?be\s+ignored\b|"
    r"\bsafe\s+to\s+ignore\b|\bexpected\s+(?:noise|warnings?|errors?)\b|已知噪声|可以忽略|可忽略|无害",
    re.IGNORECASE,
)
#: a connection the other end refused: nothing listens on that address and port
REFUSED = re.compile(r"\bconnection\s+refused\b|\bECONNREFUSED\b", re.IGNORECASE)
#: Reasons that are how a workload is configured or built (a key missing from a secret, an image
#: that cannot be pulled or run): nothing another component does at run time brings them about;
#: a change does.
STATIC_REASON = re.compile(
    r"\bexec\s+format\s+error\b|\bcouldn'?t\s+find\s+key\b|\b(configmaps?|secrets?)\s+\"?[\w.-]+\"?\s+not\s+found\b|"
    r"\bcreate\s*container\s*config\s*error\b|\b(err)?image\s*pull(back-?off)?\b|\bfailed\s+to\s+pull\s+image\b|"
    r"\bmanifest\s+unknown\b",
    re.IGNORECASE,
)
#: What an SRE looks for in the changes when an error says this: the settings it is about (an
#: image for the wrong CPU, a memory limit, a probe's timeout), even when the error names none.
RELATED_SETTINGS: tuple[tuple[re.Pattern[str], frozenset[str]], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), frozenset(stem(w) for w in words.split()))
    for pattern, words in [
        (r"exec\s+format\s+error", "arch architecture platform platforms"),
        (r"\boom\s*kill|out\s+of\s+memory|exit\s*code[:=\s]+137|memory\s+cgroup", "memory heap xmx maxrampercentage"),
        (r"insufficient\s+cpu|cpu\s+throttl", "cpu requests"),
        (r"insufficient\s+memory", "memory requests"),
        # a probe that fails where it passed: its own settings, or a process starved of CPU
        (r"(liveness|readiness|startup)\s+probe", "probe liveness readiness timeoutseconds initialdelayseconds cpu"),
        (r"volume\s+node\s+affinity|node\s+affinity\s+conflict", "zone topology affinity"),
        (r"prematurely\s+closed|connection\s+reset\s+by\s+peer|upstream\s+connect\s+error", "keepalive idle"),
        (r"too\s+many\s+(clients|connections)|remaining\s+connection\s+slots", "max_connections pool replicas"),
        (r"certificate\s+(has\s+)?expired|x509", "certificate cert tls renew"),
        (r"no\s+such\s+host|nxdomain|name\s+resolution", "dns coredns resolver"),
        (r"exceeded\s+quota", "quota resourcequota"),
        # what a reader still needed was purged first: how long the writer keeps it
        (
            r"purged\s+required\s+binary\s+logs|binary\s+log\s+expiration|requested\s+wal\s+segment\s+\S+\s+has\s+"
            r"already\s+been\s+removed|offset\s+out\s+of\s+range",
            "binlog expire expiration retention wal_keep_size max_slot_wal_keep_size",
        ),
        # a connection to the loopback address: what "localhost" resolves to (::1 as well as 127.0.0.1)
        (r"\[::1\]|(?<![\d.])127\.0\.0\.1(?![\d.])", "localhost"),
    ]
)


#: The components an error of this kind depends on, by a part of their names: a name that does
#: not resolve is the cluster resolver's business, whoever asked.
RELATED_COMPONENTS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (
        re.compile(
            r"host\s+not\s+found|no\s+such\s+host|name\s+or\s+service\s+not\s+known|nxdomain|eai_again|"
            r"enotfound|could\s+not\s+resolve|name\s+resolution|failed\s+to\s+resolve|unknownhost|i/o\s+timeout.*:53\b",
            re.IGNORECASE,
        ),
        ("dns", "resolv"),
    ),
)


def related_components(text: str) -> tuple[str, ...]:
    """Parts of the names of the components the errors in ``text`` depend on (:data:`RELATED_COMPONENTS`)."""
    return tuple(part for pattern, parts in RELATED_COMPONENTS if pattern.search(text) for part in parts)


def related_settings(text: str) -> frozenset[str]:
    """The settings the errors in ``text`` are about, by :data:`RELATED_SETTINGS`."""
    return frozenset().union(*(words for pattern, words in RELATED_SETTINGS if pattern.search(text)))


#: Words that name what a table records about a thing's present state (not a change to it).
STATE_TERMS = frozenset(
    stem(w) for w in ["status", "state", "states", "health", "condition", "conditions", "phase", "restarts", "exit"]
)
#: A change record that only says something was created: a change only close to the onset.
CREATION_TERMS = frozenset(stem(w) for w in ["create", "created", "creation", "provision", "provisioned", "added"])

#: Words that mean "something changed": where recent changes live in a database.
CHANGE_TERMS = frozenset(
    stem(w)
    for w in [
        "change",
        "changes",
        "changed",
        "config",
        "configuration",
        "setting",
        "settings",
        "deploy",
        "deployment",
        "release",
        "rollout",
        "migration",
        "rotation",
        "rotated",
        "audit",
        "history",
        "version",
        "flag",
        "feature",
        "parameter",
        "param",
        # an operator's work on the system: maintenance steps, operations, scaling actions
        "maintenance",
        "operation",
        "operations",
        "action",
        "actions",
        "scale",
        "scaling",
        # what a cloud or a platform records happening to its resources (CloudTrail, RDS events)
        "event",
        "events",
        "cloudtrail",
    ]
)

TIME_COLUMN = re.compile(
    r"(^|_)(changed|created|updated|deployed|applied|started|occurred)?_?(at|time|ts|timestamp|date)$"
)

#: Connective words of the analyst's own sentences; they say nothing about the incident.
FRAMING = frozenset(
    stem(w)
    for w in [
        "logged",
        "events",
        "event",
        "like",
        "between",
        "and",
        "from",
        "to",
        "first",
        "last",
        "time",
        "times",
        "before",
        "after",
        "starting",
        "min",
        "minutes",
        "started",
        "matching",
        "records",
        "record",
        "recorded",
        "row",
        "table",
        "says",
        "said",
        "knowledge",
        "base",
        "document",
        "section",
        "shows",
        "show",
        "most",
        "likely",
        "caused",
        "cause",
        "causes",
        "root",
        "reported",
        "problem",
        "the",
        "a",
        "of",
        "in",
        "on",
        "at",
        "by",
        "with",
        "was",
        "were",
        "is",
        "are",
        "this",
        "that",
        "which",
        "while",
        "then",
        "also",
        "its",
        "their",
        "service",
        "services",
        "level",
        "evidence",
        "found",
        "confirms",
        "confirm",
        "symptom",
        "underlying",
        "following",
        "followed",
        "change",
        "changed",
        "changes",
        "value",
        "values",
        "since",
        "earliest",
        "occurrence",
        "occurrences",
        "line",
        "lines",
        "日志",
        "记录",
        "期间",
        "例如",
        "条",
        "表",
        "文档",
        "章节",
        "显示",
        "最可能",
        "导致",
        "根因",
        "问题",
        "之前",
        "之后",
        "开始",
        "服务",
        "知识库",
        "变更",
        "证据",
    ]
)

_ACTION_VERBS = (
    r"increase|raise|restore|roll\s*back|revert|restart|scale|reduce|rotate|renew|clear|add|"
    r"remove|tune|limit|enable|disable|failover|fail\s+over|flush|extend|replace|check|verify|monitor|"
    r"free|delete|rebuild|recreate|re-?issue|re-?create|reset|drain|pin|cap|lower|switch|move|purge|warm"
)
ACTION_WORDS = re.compile(
    rf"\b({_ACTION_VERBS})\b|扩容|回滚|恢复|重启|调大|增加|续期|清理|扩展|替换|检查|监控", re.IGNORECASE
)
#: An English instruction: it starts with the verb ("Revert the pool size…"), or says what should be done.
_IMPERATIVE = re.compile(
    rf"^[\W\d_]*(?:then\s+|first\s+|always\s+|never\s+|do\s+not\s+)?({_ACTION_VERBS})\b", re.IGNORECASE
)
_MODAL = re.compile(r"\b(should|must|needs?\s+to)\b", re.IGNORECASE)
_QUOTED = re.compile(r"`[^`]*`|“[^”]*”|\"[^\"]*\"|「[^」]*」")
_ZH_ADVICE = re.compile(r"建议|应当|应该|需要|请|优先|先|再")


def is_recommendation(sentence: str, *, chinese: bool) -> bool:
    """Whether a document sentence tells the reader what to do (not how a failure unfolds).

    Quoted text (log messages, code) does not count; English sentences must be instructions;
    Chinese ones must name an action and read as advice. In an English report, Chinese
    sentences are left out.
    """
    plain = _QUOTED.sub(" ", sentence)
    if has_cjk(plain):
        return chinese and bool(ACTION_WORDS.search(plain)) and bool(_ZH_ADVICE.search(plain))
    return bool(_IMPERATIVE.match(plain) or (_MODAL.search(plain) and ACTION_WORDS.search(plain)))


DIAGNOSIS_CUES = re.compile(
    r"\b(errors?|exceptions?|fail(s|ed|ing|ures?)?|time[ds]?\s*out|timing\s+out|timeouts?|latency|slow(ness|er)?|"
    r"down|outage|crash(es|ed|ing)?|5\d\ds?|unavailable|degraded|spik(e|es|ing)|alerts?|alarms?|"
    r"incident|broken|stuck|hang(s|ing)?|oom|not\s+working|refused|rejected|leak(s|ing)?|"
    r"high\s+(cpu|memory|load)|disk\s+full|expired|p99|backlog|lag(ging)?|dropp(ed|ing))\b"
    r"|报错|错误|异常|失败|超时|故障|告警|报警|宕机|挂了|卡住|很慢|变慢|延迟|不可用|崩溃|打不开|无法|飙升|满了|过期|泄漏|积压",
    re.IGNORECASE,
)
INVESTIGATE_CUES = re.compile(
    r"\b(investigate|diagnose|troubleshoot|root\s+cause|what\s+happened|what'?s\s+(wrong|going\s+on|happening)|"
    r"why\s+(is|are|did|does|do|was|were|has|have|isn'?t|aren'?t|doesn'?t|won'?t|can'?t|hasn'?t|haven'?t)|"
    r"how\s+come|what\s+(is|'s)\s+causing|what\s+causes|"
    r"figure\s+out|look\s+into|debug)\b|排查|诊断|定位|根因|原因|怎么回事|为什么",
    re.IGNORECASE,
)
LIVE_CUES = re.compile(
    r"\b(right\s+now|currently|since|started|starting|keeps?|we\s+(are\s+)?(see|seeing|get|getting)|"
    r"(is|are)\s+\w+ing|today|this\s+morning|tonight|after\s+(the|a|our)\s+(deploy|release|change)|"
    r"\d{1,2}:\d{2}|minutes?\s+ago|hours?\s+ago|in\s+prod(uction)?)\b|现在|目前|刚才|一直|突然|今天|线上|生产",
    re.IGNORECASE,
)
KNOWLEDGE_CUES = re.compile(
    r"\b(how\s+(do|does|can|should|to|is|are)|what\s+(is|are|does)|explain|difference\s+between|"
    r"documentation|docs?|procedure|policy|best\s+practices?|configure|steps?\s+to|where\s+(can|do|is)|"
    r"guide|runbook|meaning\s+of|define|definition)\b|如何|怎么(做|配置|设置|处理)|怎样|什么是|是什么|介绍|解释|文档|流程|规范|步骤|最佳实践",
    re.IGNORECASE,
)
#: Something that runs and can be in a bad state: Kubernetes objects, hosts, the usual
#: components, and service-like names (``payment-service``, ``ledger-api``).
WORKLOAD_CUES = re.compile(
    r"(?<![\w-])(pods?|deployments?|statefulsets?|daemonsets?|replicasets?|replicas?|jobs?|cron\s*jobs?|"
    r"nodes?|containers?|namespaces?|ingress(es)?|clusters?|services?|svc|microservices?|apps?|"
    r"applications?|apis?|endpoints?|instances?|hosts?|servers?|vms?|workers?|consumers?|producers?|"
    r"queues?|brokers?|databases?|dbs?|caches?|websites?|sites?|kubelet|etcd|coredns|kafka|redis|"
    r"mysql|mariadb|postgres(ql)?|nginx|envoy|elasticsearch|rabbitmq|"
    r"[a-z][a-z0-9]*(?:-[a-z0-9]+)+)(?![\w-])|服务|容器|节点|集群|数据库|实例|接口|任务",
    re.IGNORECASE,
)
#: The article before a workload that makes it any workload, not one that is in trouble now.
GENERIC_WORKLOAD = re.compile(r"\b(a|an|any|every|each)\s+\S+\s*$", re.IGNORECASE)
#: A bad state of a workload, in the words of an engineer or of Kubernetes.
BAD_STATE_CUES = re.compile(
    r"\b(crash(es|ed|ing)?|crash\s*loop(ing)?|crashloopbackoff|restart(s|ed|ing)|keeps?\s+restarting|"
    r"(not|never|isn'?t|aren'?t|won'?t|doesn'?t|never\s+(becomes?|gets?|goes))\s+ready|notready|unready|"
    r"fail(s|ed|ing|ures?)?|slow(ness|er|ly)?|down|errors?|erroring|perform(ing|s|ed)?\s+(poorly|badly)|"
    r"poor\s+performance|degraded|pending|stuck|evicted|oom(killed)?|out\s+of\s+memory|killed|"
    r"terminated|unhealthy|unavailable|unreachable|unresponsive|hang(s|ing)?|hung|time[ds]?\s*out|"
    r"timing\s+out|timeouts?|latency|back-?off|imagepullbackoff|errimagepull|throttl(ed|ing)|flapping|"
    r"5\d\d|not\s+(working|responding|starting|running|scheduled|scheduling|healthy)|"
    r"(won'?t|doesn'?t|can'?t|cannot|fails?\s+to)\s+(start|connect|reach|schedule|run)|"
    r"issues?|problems?|wrong|broken|trouble|high\s+(cpu|memory|load|latency|error\s+rate)|"
    r"spik(e|es|ed|ing)|mismatch(ed)?|lag(ging)?|backlog|leak(s|ing)?|exhausted|saturated|full|"
    r"refused|rejected|expired|dropp(ed|ing))\b|"
    r"重启|崩溃|未就绪|没有就绪|驱逐|卡住|报错|失败|超时|很慢|变慢|不可用|挂了|宕机|异常|内存溢出",
    re.IGNORECASE,
)
#: An alert's name: CamelCase, from an alerting rule set (``KubePodCrashLooping``,
#: ``KubeDeploymentReplicasMismatch``, ``TargetDown``, ``NodeFilesystemAlmostOutOfSpace``).
ALERT_NAME = re.compile(
    r"\b(?:(?:Kube|Alert|High|Low)[A-Z][A-Za-z0-9]+|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)*?"
    r"(?:Down|Failing|Failed|Failures?|Firing|High|Low|Mismatch|CrashLooping|NotReady|Unavailable|"
    r"Unreachable|Unhealthy|Errors?|ErrorRate|Latency|Full|OutOfSpace|OutOfMemory|Throttling|Pending|"
    r"Stuck|Lag|Restarting|Expiring|Expired|Expiry|Degraded|Overcommit|Saturated|Exhausted|Missing|"
    r"Absent|Timeouts?|BackOff|Backoff|Killed|Flapping))\b"
)
#: Documentation, whatever it is about: "what is our runbook for …", "how do I configure …".
DOCUMENTATION_CUES = re.compile(
    r"\b(runbooks?|playbooks?|documentation|docs?|wiki|procedures?|polic(y|ies)|guides?|guidelines?|"
    r"best\s+practices?|sop|checklists?|configure|configuring|configuration\s+of|set\s+up|install|"
    r"difference\s+between|meaning\s+of|define|definition|in\s+general|generally|typically|"
    r"(common|typical|usual|possible)\s+(reasons?|causes?))\b|如何配置|文档|流程|规范|最佳实践",
    re.IGNORECASE,
)
#: How-to questions: documentation unless they name the workload that is in trouble.
HOW_TO_CUES = re.compile(
    r"\b(how\s+(do|does|can|should|would)\s+(i|we|you|one)|how\s+to|steps?\s+to|explain|"
    r"what\s+does\s+.+\s+mean|where\s+(can|do)\s+(i|we)\s+find)\b|如何|怎么(做|处理)|怎样",
    re.IGNORECASE,
)
#: "What is X?" and nothing else: a definition.
DEFINITION = re.compile(
    r"^\s*(what\s+(is|are)|what'?s)\s+(an?\s+|the\s+)?[\w./:-]+(\s+[\w./:-]+){0,2}\s*\??\s*$|"
    r"^\s*(什么是|\S{1,20}是什么)",
    re.IGNORECASE,
)

CHAT_CUES = re.compile(
    r"^\s*(hi|hello|hey|thanks|thank\s+you|good\s+(morning|afternoon|evening)|yo|cheers)\b|"
    r"\b(who\s+are\s+you|what\s+can\s+you\s+do|what\s+are\s+you|your\s+capabilit|help\s+me\s+understand\s+what\s+you)|"
    r"^\s*(你好|您好|嗨|谢谢|多谢)|你是谁|你能做什么|你可以做什么|介绍一下你自己|你会什么",
    re.IGNORECASE,
)
FOLLOW_UP_CUES = re.compile(
    r"^\s*(and|also|what\s+about|how\s+about|then|so|but|why)\b|\b(that|it|this)\s+(fix|cause|change)|"
    r"^\s*(那|还有|继续|为什么|然后|所以)",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=4096)
def terms(text: str) -> frozenset[str]:
    """Stemmed content tokens plus the English glossary terms of any Chinese words.

    Cached: the analyst reads the same evidence again at every step of a run."""
    found = {stem(t) for t in content_tokens(text)}
    for zh, en in GLOSSARY.items():
        if zh in text:
            found.update(stem(e) for e in en)
    return frozenset(found)


#: The Chinese connective phrases of the analyst's own sentences (removed before tokenising).
FRAMING_PHRASES = sorted(
    [
        "期间记录了",
        "起记录了",
        "比症状早",
        "分钟",
        "知识库",
        "指出",
        "变更记录",
        "最可能由",
        "导致",
        "的问题直接由",
        "引起",
        "发生在变更",
        "之后",
        "之前",
        "参见",
        "例如",
        "日志",
        "记录",
        "期间",
        "根因",
        "问题",
        "服务",
        "证据",
        "条",
    ],
    key=len,
    reverse=True,
)


@functools.lru_cache(maxsize=4096)
def salient(text: str) -> frozenset[str]:
    """Terms that carry incident meaning: no framing words, nothing containing a digit."""
    for phrase in FRAMING_PHRASES:
        text = text.replace(phrase, " ")
    return frozenset(t for t in terms(text) if t not in FRAMING and not any(ch.isdigit() for ch in t))
