"""Redis agent-memory-server (AMS) over its REST API, on the project's embedded Redis.

AMS runs as its own server process (``ams_server.py``, uvicorn, one worker) against the same
redis-server the platform uses, in database 0 (RediSearch indexes only live there) under key
prefixes and index names of its own, ``peers_ams_<run>_...``: the platform's keys and indexes are
never read or written, and everything under the prefix is dropped after each measurement.
Long-term memories are written with ``POST /v1/long-term-memory/`` (``deduplicate: false``: its
deduplication merges near-duplicates with an LLM) and searched with
``POST /v1/long-term-memory/search`` (its defaults otherwise: vector KNN, then its recency re-rank
of those results). No LLM feature is on (topic, entity and discrete-memory extraction off);
background tasks go through Docket to AMS's task worker (``agent-memory task-worker``), as AMS is
deployed by default, with the Docket keys under the run's prefix too.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

from common import HERE, WORK, load_measurer, load_row, log, model_dir, percentiles, recall_at_10

EMBEDDING_MODEL = "local/all-MiniLM-L6-v2"
BYTES_PER_MEMORY = 4000  # a generous estimate of what one memory takes in Redis (hash, vector, HNSW)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AMS:
    def __init__(self, redis_url: str, given: list[tuple[str, str]], torch_threads: int) -> None:
        import redis

        self.run = f"peers_ams_{uuid.uuid4().hex[:8]}"
        self.index = f"{self.run}_memories"
        self.prefix = f"{self.run}_mem"
        self.wm_index = f"{self.run}_wm"
        self.redis = redis.Redis.from_url(redis_url)
        self.port = free_port()
        env = dict(os.environ)
        env.update(
            {
                "REDIS_URL": redis_url,
                "PORT": str(self.port),
                "LONG_TERM_MEMORY": "true",
                "USE_DOCKET": "true",
                "DOCKET_NAME": f"{self.run}_docket",
                "ENABLE_DISCRETE_MEMORY_EXTRACTION": "false",
                "ENABLE_TOPIC_EXTRACTION": "false",
                "ENABLE_NER": "false",
                "INDEX_ALL_MESSAGES_IN_LONG_TERM_MEMORY": "false",
                # Its scheduled compaction (every 10 minutes by default) merges near-duplicates
                # with an LLM: not during a measurement.
                "COMPACTION_EVERY_MINUTES": "100000",
                "COMPACT_SEMANTIC_DUPLICATES": "false",
                "WORKING_MEMORY_MIGRATION_COMPLETE": "true",
                "WORKING_MEMORY_INDEX_NAME": self.wm_index,
                "WORKING_MEMORY_INDEX_PREFIX": f"{self.run}_wm:",
                "REDISVL_INDEX_NAME": self.index,
                "REDISVL_INDEX_PREFIX": self.prefix,
                "REDISVL_VECTOR_DIMENSIONS": "384",
                "EMBEDDING_MODEL": EMBEDDING_MODEL,
                "MEMORY_VECTOR_DB_FACTORY": "ams_plugin.create_db",
                "DISABLE_AUTH": "true",
                "AUTH_MODE": "disabled",
                "PEERS_MODEL_DIR": str(model_dir()),
                "PEERS_GIVEN_VECTORS": os.pathsep.join(f"{t}|{v}" for t, v in given),
                "PEERS_TORCH_THREADS": str(torch_threads),
                "PYTHONPATH": str(HERE),
            }
        )
        WORK.mkdir(exist_ok=True)
        self.logfile = open(WORK / "ams-server.log", "ab")  # noqa: SIM115
        self.procs = [
            subprocess.Popen(
                [sys.executable, str(HERE / "ams_server.py"), arg],
                cwd=HERE,
                env=env,
                stdout=self.logfile,
                stderr=subprocess.STDOUT,
            )
            for arg in (str(self.port), "worker")
        ]
        self.proc = self.procs[0]
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(
                    f"agent-memory-server exited ({self.proc.returncode}); see {WORK / 'ams-server.log'}"
                )
            try:
                status, _ = self.request("GET", "/v1/health")
                if status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            self.stop()
            raise RuntimeError("agent-memory-server did not start")
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def request(
        self, method: str, path: str, body: Any = None, conn: http.client.HTTPConnection | None = None
    ):
        c = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request(
            method,
            path,
            body=json.dumps(body) if body is not None else None,
            headers={"Content-Type": "application/json"},
        )
        r = c.getresponse()
        data = r.read()
        if conn is None:
            c.close()
        return r.status, data

    def call(self, method: str, path: str, body: Any):
        """On the kept-alive connection; once more on a new one when the server has closed it
        (uvicorn closes a connection idle for 5 s, as while the loader waits for the index)."""
        try:
            return self.request(method, path, body, conn=self.conn)
        except (http.client.HTTPException, ConnectionError):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            return self.request(method, path, body, conn=self.conn)

    def add(self, memories: list[dict]) -> None:
        status, data = self.call(
            "POST", "/v1/long-term-memory/", {"memories": memories, "deduplicate": False}
        )
        if status != 200:
            raise RuntimeError(f"AMS create answered {status}: {data[:300]!r}")

    def search(self, text: str, namespace: str) -> list[dict]:
        status, data = self.call(
            "POST", "/v1/long-term-memory/search", {"text": text, "limit": 10, "namespace": {"eq": namespace}}
        )
        if status != 200:
            raise RuntimeError(f"AMS search answered {status}: {data[:300]!r}")
        return json.loads(data)["memories"]

    def indexed(self) -> int:
        try:
            info = self.redis.execute_command("FT.INFO", self.index)
        except Exception:
            return 0
        fields = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=False))
        return int(fields.get(b"num_docs", fields.get("num_docs", 0)))

    def wait_indexed(self, n: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while self.indexed() < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"AMS indexed {self.indexed()} of {n} memories in {timeout} s")
            time.sleep(0.2)

    def room_for(self, count: int) -> bool:
        info = self.redis.info("memory")
        limit = int(info.get("maxmemory", 0)) or 1 << 40
        return int(info["used_memory"]) + count * BYTES_PER_MEMORY < 0.8 * limit

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.logfile.close()

    def drop(self) -> int:
        """Everything this run wrote: its two indexes with their documents, then any key left
        under its prefix."""
        for name in (self.index, self.wm_index):
            with contextlib.suppress(Exception):  # already gone
                self.redis.execute_command("FT.DROPINDEX", name, "DD")
        left = 0
        for key in self.redis.scan_iter(match=f"{self.run}_*", count=1000):
            self.redis.delete(key)
            left += 1
        return left


def run_search(
    redis_url: str,
    sizes: list[int],
    corpus: tuple[str, str],
    texts: list[str],
    queries: list[str],
    torch_threads: int,
    clients: list[int] = (),  # type: ignore[assignment]
    seconds: float = 15.0,
) -> list[dict]:
    """Search latency one query at a time, then (``clients``) loads of that many concurrent clients
    for ``seconds`` each, as the platform's side measures them."""
    rows = []
    for size in sizes:
        ams = AMS(redis_url, [corpus], torch_threads)
        try:
            if not ams.room_for(size):
                log(
                    f"AMS: {size} memories would not fit in the embedded Redis's maxmemory beside the platform's data: skipped"
                )
                continue
            log(f"AMS: loading {size} memories (POST /v1/long-term-memory/, 100 a request)")
            t0 = time.perf_counter()
            for offset in range(0, size, 100):
                batch = texts[offset : min(size, offset + 100)]
                ams.add(
                    [
                        {
                            "id": f"m{offset + i}",
                            "text": t,
                            "namespace": "bench",
                            "user_id": "bench",
                            "memory_type": "semantic",
                        }
                        for i, t in enumerate(batch)
                    ]
                )
                done = offset + len(batch)
                if done % 5000 == 0 or done == size:
                    ams.wait_indexed(done - 2000 if done < size else done)
                    rate = done / (time.perf_counter() - t0)
                    log(f"AMS: loaded {done}/{size} ({rate:.0f} memories/s)")
            load_s = time.perf_counter() - t0
            time.sleep(2)  # the last writes' background tasks
            for q in queries[:20]:
                ams.search(q, "bench")
            log(f"AMS: {size}: measuring search over HTTP")
            times = []
            for q in queries[20:]:
                t1 = time.perf_counter()
                ams.search(q, "bench")
                times.append((time.perf_counter() - t1) * 1000)
            rows.append(
                {
                    "system": "AMS",
                    "path": "HTTP, query embedded",
                    "memories": size,
                    "load_s": round(load_s, 1),
                    **percentiles(times),
                }
            )
            load = load_measurer()
            bodies = [
                json.dumps({"text": q, "limit": 10, "namespace": {"eq": "bench"}}) for q in queries[20:]
            ]
            found = load.loads(
                f"http://127.0.0.1:{ams.port}/v1/long-term-memory/search",
                bodies,
                list(clients),
                seconds,
                headers={},
                log=lambda line, size=size: log(f"AMS: {size}: {line}"),
            )
            rows += [load_row("AMS", "HTTP load, query embedded", size, row) for row in found]
        finally:
            ams.stop()
            left = ams.drop()
            log(f"AMS: dropped its indexes, and {left} keys under its prefix")
    return rows


def run_locomo(redis_url: str, conversations: list[dict], torch_threads: int) -> dict:
    """Each conversation in a namespace of its own; one long-term memory per turn, its id the
    conversation and LoCoMo dia_id; each question searched within its conversation's namespace."""
    ams = AMS(redis_url, [], torch_threads)
    found: list[list[list[str]]] = []
    evidence: list[set[str]] = []
    times: list[float] = []
    try:
        total = 0
        for conv in conversations:
            ns = f"locomo-{conv['sample_id']}"
            log(f"AMS: {conv['sample_id']}: adding {len(conv['turns'])} turns")
            for offset in range(0, len(conv["turns"]), 50):
                batch = conv["turns"][offset : offset + 50]
                ams.add(
                    [
                        {
                            "id": f"{conv['sample_id']}|{t['dia_id']}",
                            "text": t["text"],
                            "namespace": ns,
                            "user_id": conv["speakers"][0],
                            "session_id": f"session_{t['session']}",
                            "memory_type": "episodic",
                            "event_date": t["occurred_at"],
                        }
                        for t in batch
                    ]
                )
            total += len(conv["turns"])
            ams.wait_indexed(total)
            time.sleep(1)
            for q in conv["questions"]:
                if not q["evidence"]:
                    continue
                t0 = time.perf_counter()
                results = ams.search(q["question"], ns)
                times.append((time.perf_counter() - t0) * 1000)
                found.append([[r["id"].split("|", 1)[1]] for r in results])
                evidence.append(set(q["evidence"]))
    finally:
        ams.stop()
        ams.drop()
    return {
        "system": "AMS",
        "questions": len(evidence),
        "turn_recall10": recall_at_10(found, evidence),
        "latency_ms": percentiles(times),
    }
