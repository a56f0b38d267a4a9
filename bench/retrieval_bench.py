"""Retrieval latency of the local engine at 10k and 100k chunks, beside rank-bm25; ingestion rate.

A seeded generator writes a synthetic corpus of ops-document chunks (runbooks, postmortems,
alerts: service names, error words, config keys, a long tail of rarer terms, Zipf-like
frequencies, every chunk about one topic), so nothing is downloaded and every run searches the
same text. At each size, in a fresh interpreter:

- the build time of ``LocalIndex`` (terms, bm25s, the vector matrix);
- search median and p95 over the queries: lexical only; hybrid with the query vector given;
  hybrid including the real local query embedding (``MiniLMEmbedder``), which is what a user
  waits for. The chunks' vectors are random unit vectors (embedding 100k chunks with the local
  model would take hours here), so the dense side does all its real work but its cosines are
  meaningless; the query vectors are the model's own;
- rank-bm25 (``BM25Okapi``) over the same chunks, tokenised by the same ``knowledge.lexical``
  terms: ``get_scores`` plus a top-k, on the same queries, interleaved with the local engine's
  so machine load falls on both alike.

Then ingestion: synthetic Markdown documents chunked by ``knowledge.chunking`` (chunks/s), and
chunked and embedded with the local model the way ``document_index`` does it, one document at
a time (chunks/s).

    python -m bench.retrieval_bench [--sizes 10000,100000] [--queries 50] [--quick] [--strict]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np
import numpy.typing as npt

TARGET_HYBRID_MS = 15.0
TARGET_SPEEDUP = 5.0
TARGET_SIZE = 100_000
SEED = 20_240_611
DIMENSION = 384
#: what the service asks the index for: the knowledge tool's default top_k (5) plus its spare 4
TOP_K = 9
#: chunks whose terms() are timed to estimate terms()' share of the build
TERMS_SAMPLE = 2_000

# --- the synthetic corpus -------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return text.split()


_SERVICE_STEMS = _words(
    "payment order checkout inventory auth user billing search notification shipping catalog cart "
    "ledger fraud pricing recommendation session profile invoice refund subscription coupon review "
    "media upload report export import analytics audit webhook email sms push geo tax wallet loyalty"
)
_SERVICE_SUFFIXES = ("service", "api", "worker", "gateway", "db", "cache", "consumer", "scheduler")
_COMPONENTS = _words(
    "mysql mariadb postgres redis kafka zookeeper rabbitmq nginx envoy haproxy istio kubernetes kubelet "
    "etcd coredns pod node container deployment statefulset ingress celery uvicorn gunicorn jvm "
    "elasticsearch prometheus grafana alertmanager loki jaeger s3 cdn loadbalancer proxy sidecar cron "
    "replica primary shard partition broker queue topic lock mutex thread heap"
)
_ERRORS = _words(
    "timeout timeouts refused exhausted deadlock oom killed crashloop evicted unreachable throttled "
    "saturated backpressure lag stalled leak expired revoked rejected dropped corrupted failover "
    "rollback degraded flapping spike spikes latency errors error exception panic segfault 500 502 "
    "503 504 429 nxdomain handshake certificate tls retry retries storm split-brain"
)
_OPS_WORDS = _words(
    "check verify restart scale drain cordon page escalate dashboard alert threshold runbook incident "
    "mitigation symptom cause impact customer request response connection pool client server upstream "
    "downstream database table index query slow log logs metric metrics trace span p99 p95 cpu memory "
    "disk inode quota network packet loss dns config configuration setting limit limits deploy release "
    "canary version migration schema backup restore snapshot volume mount permission token key secret "
    "rotate cache eviction ttl hit miss ratio write read replica lag consumer producer offset commit "
    "batch job worker task schedule delay backlog rate throughput capacity autoscaler hpa replicas "
    "health probe liveness readiness endpoint route header payload size body status code user account "
    "login session cookie region zone cluster namespace host instance vm ami image registry pull "
    "build pipeline flag toggle feature traffic shift weight percent window maintenance oncall "
    "postmortem timeline detection resolution owner team ticket follow-up action item monitor sla slo "
    "budget burn availability increase decrease raise lower reduce tune adjust inspect grep tail "
    "kubectl describe events top exec rollout undo history pause resume reconnect reset flush purge "
    "compact vacuum analyze reindex lock wait blocked contention hot partition skew throughput"
)
_CONFIG_PARTS = _words(
    "db pool max min size timeout ms http client retry backoff idle conn queue depth worker count "
    "cache ttl seconds heap xmx gc threads limit burst rate buffer bytes keepalive"
)
_STOPWORDS = _words("the a to of is in and for on with when this that it be are if after before from by")
_SYLLABLES = _words(
    "ka lo mi ne ru ta vo shi en ar ol ix um ber dan fel gor hul jin kes lum mor nav pex qui ros sul tev"
)
_SECTIONS = (
    "Symptoms",
    "Impact",
    "Diagnosis",
    "Mitigation",
    "Root cause",
    "Rollback",
    "Escalation",
    "Background",
    "Timeline",
    "Follow-up actions",
    "Alert",
    "Dashboards",
)
_TITLES = ("{} runbook", "Postmortem: {} {}", "{} on-call guide", "Alert: {} {}", "{} architecture notes")


@dataclass(frozen=True, slots=True)
class Vocabulary:
    words: npt.NDArray[np.object_]
    cdf: npt.NDArray[np.float64]
    services: list[str]


def vocabulary(rng: np.random.Generator, size: int = 3_000) -> Vocabulary:
    """A few thousand terms, ops words first, then a long tail; Zipf–Mandelbrot weights."""
    services = [f"{stem}-{suffix}" for stem in _SERVICE_STEMS for suffix in _SERVICE_SUFFIXES]
    services = [services[i] for i in rng.permutation(len(services))[:120]]
    configs = {
        ".".join(rng.choice(_CONFIG_PARTS, size=int(rng.integers(2, 4)), replace=False)) + "_" + str(part)
        for part in rng.choice(_CONFIG_PARTS, size=200)
    }
    hosts = [f"{rng.choice(_COMPONENTS)}-{i:02d}" for i in range(60)]
    core = list(dict.fromkeys([*_OPS_WORDS, *_ERRORS, *_COMPONENTS]))
    core = [core[i] for i in rng.permutation(len(core))]
    tail = list(dict.fromkeys([*services, *sorted(configs), *hosts]))
    seen = set(core) | set(tail)
    while len(core) + len(tail) < size:
        word = "".join(rng.choice(_SYLLABLES, size=int(rng.integers(2, 4))))
        if word not in seen:
            seen.add(word)
            tail.append(word)
    tail = [tail[i] for i in rng.permutation(len(tail))]
    words = np.array(core + tail, dtype=object)
    weights = 1.0 / (np.arange(len(words)) + 2.7) ** 1.05
    return Vocabulary(words, np.cumsum(weights) / weights.sum(), services)


@dataclass(frozen=True, slots=True)
class Topic:
    service: str
    title: str
    terms: npt.NDArray[np.int64]


def topics(rng: np.random.Generator, vocab: Vocabulary, count: int) -> list[Topic]:
    """What a chunk is about: a service and a handful of terms, mostly from the middle of the range."""
    out = []
    for _ in range(count):
        service = str(rng.choice(vocab.services))
        # mid-frequency terms are what make a chunk findable: skip the very common head
        picked = np.searchsorted(vocab.cdf, rng.uniform(0.25, 1.0, size=14))
        error = str(vocab.words[picked[0]])
        template = _TITLES[int(rng.integers(len(_TITLES)))]
        out.append(Topic(service, template.format(service, error), picked))
    return out


def chunk_texts(count: int, *, seed: int = SEED) -> tuple[list[str], list[Topic], Vocabulary]:
    """``count`` chunk texts as the index sees them (``search_text``: title › section, then body)."""
    rng = np.random.default_rng(seed)
    vocab = vocabulary(rng)
    about = topics(rng, vocab, max(50, count // 40))
    lengths = rng.integers(60, 151, size=count)
    total = int(lengths.sum())
    drawn = np.searchsorted(vocab.cdf, rng.random(total))
    which = rng.integers(0, len(about), size=count)
    topic_terms = np.stack([t.terms for t in about])
    on_topic = rng.random(total) < 0.3
    owner = np.repeat(which, lengths)
    drawn[on_topic] = topic_terms[owner[on_topic], rng.integers(0, topic_terms.shape[1], size=int(on_topic.sum()))]
    words = vocab.words[drawn]
    stop = rng.random(total) < 0.25
    words[stop] = np.array(_STOPWORDS, dtype=object)[rng.integers(0, len(_STOPWORDS), size=int(stop.sum()))]
    sections = rng.integers(0, len(_SECTIONS), size=count)
    texts = []
    start = 0
    for i in range(count):
        end = start + int(lengths[i])
        body = words[start:end].tolist()
        for cut in range(int(rng.integers(8, 14)), len(body) - 1, 12):
            body[cut] += "."
        topic = about[int(which[i])]
        texts.append(f"{topic.title} › {_SECTIONS[int(sections[i])]}\n{topic.service} {' '.join(body)}.")
        start = end
    return texts, about, vocab


_QUERY_FORMS = (
    "{service} {a} {b}",
    "why is {service} returning {a} after {b}",
    "{a} {b} {c} on {service}",
    "how to fix {a} {b} in {service}",
    "{service} {a} {b} {c} {d}",
    "{a} {b}",
)


def queries(count: int, about: Sequence[Topic], vocab: Vocabulary, *, seed: int = SEED + 1) -> list[str]:
    """What an on-call engineer would type about one of the corpus's topics."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        topic = about[int(rng.integers(len(about)))]
        a, b, c, d = (str(vocab.words[t]) for t in rng.choice(topic.terms, size=4, replace=False))
        out.append(_QUERY_FORMS[i % len(_QUERY_FORMS)].format(service=topic.service, a=a, b=b, c=c, d=d))
    return out


def unit_vectors(count: int, *, seed: int = SEED + 2) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, DIMENSION), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def markdown_documents(count: int, *, seed: int = SEED + 3) -> list[tuple[str, str]]:
    """(title, Markdown text) of runbook-like documents: sections, sub-sections, paragraphs."""
    rng = np.random.default_rng(seed)
    texts, about, _ = chunk_texts(count * 12, seed=seed)
    sentences = [s.strip() + "." for text in texts for s in text.split("\n", 1)[1].split(".") if s.strip()]
    cursor = 0
    docs = []
    for i in range(count):
        topic = about[i % len(about)]
        lines = [f"# {topic.title}", ""]
        for section in rng.choice(_SECTIONS, size=int(rng.integers(3, 7)), replace=False):
            lines += [f"## {section}", ""]
            for sub in range(int(rng.integers(0, 3)) + 1):
                if sub:
                    lines += [f"### {topic.service} step {sub}", ""]
                for _ in range(int(rng.integers(1, 4))):
                    n = int(rng.integers(2, 7))
                    lines += [" ".join(sentences[(cursor + k) % len(sentences)] for k in range(n)), ""]
                    cursor += n
        docs.append((topic.title, "\n".join(lines)))
    return docs


# --- measuring ------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "p95": percentile(values, 0.95)}


def bench_size(size: int, query_count: int, rounds: int) -> dict[str, Any]:
    from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]

    from knowledge.dense import exact_scores
    from knowledge.embeddings import MiniLMEmbedder
    from knowledge.lexical import terms
    from knowledge.retrieval import LocalIndex, RetrievalConfig

    started = time.perf_counter()
    texts, about, vocab = chunk_texts(size)
    asked = queries(query_count, about, vocab)
    vectors = unit_vectors(size)
    generate_s = time.perf_counter() - started

    started = time.perf_counter()
    index = LocalIndex(range(size), texts, vectors, config=RetrievalConfig(threads=_threads()))
    build_s = time.perf_counter() - started

    started = time.perf_counter()
    sample = texts[:TERMS_SAMPLE]
    sample_terms = [terms(t) for t in sample]
    terms_s = (time.perf_counter() - started) * size / len(sample)

    # rank-bm25 gets the very terms LocalIndex indexes. terms() of a whitespace-free word does
    # not depend on its neighbours, so a per-word cache gives the same lists in a fraction of
    # the time (checked on the sample) and keeps the run short.
    word_terms = functools.lru_cache(maxsize=None)(lambda word: tuple(terms(word)))
    tokenised = [[term for word in text.split() for term in word_terms(word)] or [""] for text in texts]
    if tokenised[: len(sample)] != [t or [""] for t in sample_terms]:
        raise SystemExit("the per-word terms differ from terms(): the rank-bm25 corpus would not be the same")
    started = time.perf_counter()
    okapi = BM25Okapi(tokenised)
    okapi_build_s = time.perf_counter() - started
    query_terms = [terms(q) for q in asked]

    embedder = MiniLMEmbedder(threads=_threads())
    query_vectors = embedder.embed(asked)
    # The dense ranking must be exactly the sort of every row's exact score, however the index
    # prunes; a plain float32 scan may differ from it only between rows closer than its rounding.
    assert index.dense is not None
    exact = float32_same = 0
    for vector in query_vectors:
        scores = exact_scores(vectors, vector)
        expected = np.lexsort((np.arange(len(scores)), -scores))[: index.config.candidates]
        got = index.dense.top(vector, index.config.candidates).tolist()
        exact += got == expected.tolist()
        float32_same += got == np.argsort(-(vectors @ vector), kind="stable")[: index.config.candidates].tolist()
    del texts, tokenised
    # Everything built so far lives as long as the process: keep the collector from walking
    # rank-bm25's many dicts (and the texts) in the middle of a timed search.
    gc.collect()
    gc.freeze()

    def okapi_top(i: int) -> list[int]:
        scores = okapi.get_scores(query_terms[i])
        # argpartition, not the library's full argsort (get_top_n): the fairest top-k for it
        part = np.argpartition(-scores, TOP_K - 1)[:TOP_K]
        return part[np.argsort(-scores[part], kind="stable")].tolist()  # type: ignore[no-any-return]

    # Untimed pass: warms the caches, and checks that every engine finds something, and the same.
    hits: dict[str, list[int]] = {"lexical": [], "hybrid": []}
    agree = 0
    for i, query in enumerate(asked):
        lexical = index.search(query, top_k=TOP_K)
        hits["lexical"].append(len(lexical))
        hits["hybrid"].append(len(index.search(query, top_k=TOP_K, query_vector=query_vectors[i])))
        agree += bool(lexical) and lexical[0].key in okapi_top(i)

    times: dict[str, list[float]] = {"lexical": [], "hybrid": [], "hybrid_embed": [], "rank_bm25": []}
    for _ in range(rounds):
        for i, query in enumerate(asked):
            t0 = time.perf_counter()
            index.search(query, top_k=TOP_K)
            t1 = time.perf_counter()
            index.search(query, top_k=TOP_K, query_vector=query_vectors[i])
            t2 = time.perf_counter()
            index.search(query, top_k=TOP_K, query_vector=embedder.embed([query])[0])
            t3 = time.perf_counter()
            okapi_top(i)
            t4 = time.perf_counter()
            times["lexical"].append((t1 - t0) * 1000.0)
            times["hybrid"].append((t2 - t1) * 1000.0)
            times["hybrid_embed"].append((t3 - t2) * 1000.0)
            times["rank_bm25"].append((t4 - t3) * 1000.0)
    return {
        "size": size,
        "queries": len(asked),
        "terms": len(vocab.words),
        "words": statistics.median(len(t) for t in query_terms),
        "generate_s": generate_s,
        "build_s": build_s,
        "terms_s": terms_s,
        "okapi_build_s": okapi_build_s,
        "samples": len(times["lexical"]),
        "search": {mode: _summary(values) for mode, values in times.items()},
        "hits": {mode: statistics.median(values) for mode, values in hits.items()},
        "agreement": agree / len(asked),
        "dense_exact": exact / len(asked),
        "dense_float32_same": float32_same / len(asked),
        "quantized": index.dense.quantized,
    }


def bench_ingestion(documents: int, embed_chunks: int, embed_seconds: float) -> dict[str, Any]:
    from knowledge.chunking import chunk_text, search_text
    from knowledge.embeddings import MiniLMEmbedder

    docs = markdown_documents(documents)
    started = time.perf_counter()
    pieces = [chunk_text(text) for _, text in docs]
    chunk_s = time.perf_counter() - started
    chunks = sum(len(p) for p in pieces)

    embedder = MiniLMEmbedder(threads=_threads())
    embedder.embed([search_text(docs[0][0], p.heading_path, p.text) for p in pieces[0][:4]])  # warm-up
    embedded = used = 0
    started = time.perf_counter()
    # As document_index does it: chunk one document, embed all its chunks in one call. Stops at
    # a chunk count or a time budget, whichever comes first, so a loaded machine cannot stall it.
    for title, text in docs:
        parts = chunk_text(text)
        embedder.embed([search_text(title, p.heading_path, p.text) for p in parts])
        embedded += len(parts)
        used += 1
        if embedded >= embed_chunks or time.perf_counter() - started >= embed_seconds:
            break
    embed_s = time.perf_counter() - started
    return {
        "documents": documents,
        "chunks": chunks,
        "chunk_s": chunk_s,
        "tokens_median": statistics.median(p.token_count for doc in pieces for p in doc),
        "embed_documents": used,
        "embedded": embedded,
        "embed_s": embed_s,
    }


def _threads() -> int:
    """The measured processes' thread count for onnxruntime: ``--threads``, else one per core."""
    return int(os.environ.get("COMPUTE_THREADS") or 0)


def _in_fresh_process(*part: str, threads: int | None) -> dict[str, Any]:
    """Each part runs in its own interpreter, so one size's memory never taxes the next's timing."""
    env = dict(os.environ)
    if threads:
        env.update({name: str(threads) for name in _THREAD_VARIABLES})
    out = subprocess.run(
        [sys.executable, "-m", "bench.retrieval_bench", "--part", *part],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


#: where the BLAS builds numpy may use, and this benchmark's onnxruntime sessions, read their thread count
_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "COMPUTE_THREADS")


# --- the report -----------------------------------------------------------------------------

_MODES = (
    ("lexical", "local lexical"),
    ("hybrid", "local hybrid, query vector given"),
    ("hybrid_embed", "local hybrid + query embedding"),
    ("rank_bm25", "rank-bm25 get_scores + top-k"),
)
_CELL = 22


def _row(label: str, cells: Sequence[str]) -> None:
    print(f"  {label:36s}" + "".join(f"{cell:>{_CELL}}" for cell in cells))


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s.replace("_", "")) for s in text.split(",") if s.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError("sizes are comma-separated chunk counts, e.g. 10000,100000") from exc
    if not sizes or min(sizes) < TOP_K:
        raise argparse.ArgumentTypeError(f"each size must be at least {TOP_K} chunks")
    return sizes


def _thread_setting() -> str:
    set_ = [f"{name}={os.environ[name]}" for name in _THREAD_VARIABLES if name in os.environ]
    return ", ".join(set_) if set_ else "the library's default (one per core)"


def report(
    results: list[dict[str, Any]], ingest: dict[str, Any], *, rounds: int, load: Sequence[float], blas: str
) -> bool:
    """Print the table and the targets; True when both targets are met."""
    first = results[0]
    print(
        f"retrieval benchmark — local engine (bm25s + exact dense, RRF) beside rank-bm25 {metadata.version('rank-bm25')}"
    )
    print(
        f"  synthetic ops corpus (seed {SEED}): {first['terms']:,} terms, chunks of 60–150 words; "
        f"{first['queries']} queries of {first['words']:.0f} terms median, {rounds} timed rounds, top_k {TOP_K}"
    )
    print("  chunk vectors: random unit vectors (384 d); query vectors: the local MiniLM model's")
    print(
        f"  load average (1 min) {load[0]:.2f} at the start, {load[1]:.2f} at the end, on {os.cpu_count()} cores;"
        f" numeric threads: {blas}"
    )
    _row("", [f"{r['size']:,} chunks" for r in results])
    _row("corpus generation", [f"{r['generate_s']:.2f} s" for r in results])
    _row("LocalIndex build", [f"{r['build_s']:.2f} s" for r in results])
    _row("  of which terms(), estimated", [f"{r['terms_s']:.2f} s" for r in results])
    _row("rank-bm25 build (same terms)", [f"{r['okapi_build_s']:.2f} s" for r in results])
    print("  search, ms: median / p95")
    for mode, label in _MODES:
        _row(f"  {label}", [f"{r['search'][mode]['median']:.2f} / {r['search'][mode]['p95']:.2f}" for r in results])
    for mode, label in (("lexical", "lexical"), ("hybrid", "hybrid, vector given"), ("hybrid_embed", "hybrid + emb.")):
        _row(
            f"  rank-bm25 ÷ {label}",
            [f"{r['search']['rank_bm25']['median'] / r['search'][mode]['median']:.1f}×" for r in results],
        )
    _row(
        "  hits per query, lexical / hybrid",
        [f"{r['hits']['lexical']:.0f} / {r['hits']['hybrid']:.0f}" for r in results],
    )
    _row("  top lexical hit in rank-bm25's top", [f"{r['agreement'] * 100:.0f} %" for r in results])
    _row("  dense scan", ["int8 pruned" if r["quantized"] else "float32" for r in results])
    _row("  dense top-50 = the exact sort", [f"{r['dense_exact'] * 100:.0f} %" for r in results])
    _row("  … = a float32 BLAS scan's", [f"{r['dense_float32_same'] * 100:.0f} %" for r in results])

    # The targets are set at 100k chunks: judged there, else at the size nearest to it.
    judged = min(results, key=lambda r: (abs(r["size"] - TARGET_SIZE), -r["size"]))
    note = "" if judged["size"] == TARGET_SIZE else f" (the targets are set at {TARGET_SIZE:,})"
    search = judged["search"]
    hybrid = search["hybrid_embed"]["median"]
    speedup = search["rank_bm25"]["median"] / hybrid
    ok_latency = bool(hybrid <= TARGET_HYBRID_MS)
    ok_speedup = bool(speedup >= TARGET_SPEEDUP)
    print(f"  at {judged['size']:,} chunks{note}, hybrid search including the query embedding:")
    print(
        f"    median {hybrid:7.2f} ms   p95 {search['hybrid_embed']['p95']:7.2f} ms"
        f"   target ≤ {TARGET_HYBRID_MS:.0f} ms  {'OK' if ok_latency else 'MISSED'}"
    )
    print(
        f"    {speedup:5.1f}× rank-bm25's median ({search['rank_bm25']['median']:.2f} ms)"
        f"   target ≥ {TARGET_SPEEDUP:.0f}×  {'OK' if ok_speedup else 'MISSED'}"
    )
    print(
        f"    (with the query vector given: median {search['hybrid']['median']:.2f} ms, "
        f"{search['rank_bm25']['median'] / search['hybrid']['median']:.1f}× rank-bm25's)"
    )
    print(
        f"  ingestion: {ingest['documents']} Markdown documents → {ingest['chunks']:,} chunks "
        f"({ingest['tokens_median']:.0f} tokens median)"
    )
    print(f"    chunking alone                {ingest['chunks'] / ingest['chunk_s']:9,.0f} chunks/s")
    print(
        f"    chunk + embed (local MiniLM)  {ingest['embedded'] / ingest['embed_s']:9,.1f} chunks/s"
        f"   ({ingest['embedded']:,} chunks of {ingest['embed_documents']} documents in {ingest['embed_s']:.1f} s,"
        " one embed call per document)"
    )
    if not all(r["dense_exact"] == 1.0 for r in results):
        print("  the dense top-50 differs from the exact sort: a defect, not noise")
    return ok_latency and ok_speedup


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=[10_000, 100_000], help="chunk counts, comma-separated")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2, help="timed passes over the queries")
    parser.add_argument("--documents", type=int, default=300, help="Markdown documents chunked for the ingestion rate")
    parser.add_argument("--embed-chunks", type=int, default=400, help="chunks embedded for the ingestion rate, at most")
    parser.add_argument("--embed-seconds", type=float, default=30.0, help="time spent embedding, at most")
    parser.add_argument(
        "--threads",
        type=int,
        help="numpy's BLAS and onnxruntime threads in the measured processes (default: as inherited)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, few queries: a smoke run")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:
        kind, *values = args.part
        if kind == "size":
            size, count, rounds = (int(x) for x in values)
            print(json.dumps(bench_size(size, count, rounds)))
        else:
            print(json.dumps(bench_ingestion(int(values[0]), int(values[1]), float(values[2]))))
        return 0
    if args.quick:
        args.sizes, args.queries, args.rounds = [1_000, 5_000], 12, 1
        args.documents, args.embed_chunks, args.embed_seconds = 30, 32, 10.0
    start_load = os.getloadavg()[0]
    threads = args.threads
    results = [
        _in_fresh_process("size", str(size), str(args.queries), str(args.rounds), threads=threads)
        for size in args.sizes
    ]
    ingest = _in_fresh_process(
        "ingest", str(args.documents), str(args.embed_chunks), str(args.embed_seconds), threads=threads
    )
    blas = f"{threads} (set by --threads)" if threads else _thread_setting()
    ok = report(results, ingest, rounds=args.rounds, load=(start_load, os.getloadavg()[0]), blas=blas)
    # Like the other benchmarks, a missed target is printed; only --strict makes it fail the run,
    # since on a shared machine one noisy run is no verdict. A wrong dense ranking is no noise.
    if not all(r["dense_exact"] == 1.0 for r in results):
        return 1
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
