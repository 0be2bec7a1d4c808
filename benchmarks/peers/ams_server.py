"""Start agent-memory-server's REST API (its FastAPI app under uvicorn, as `agent-memory api`
serves it) on a loopback port, with all-MiniLM-L6-v2 registered as its embedding model (384
dimensions), so its startup check knows the model's size. Configured by environment (``ams_side``
sets it: the Redis, the key prefixes, no LLM features, the store factory in ``ams_plugin``).

Usage: python ams_server.py PORT      the API (uvicorn, one process)
       python ams_server.py worker    its task worker (`agent-memory task-worker`: Docket on the
                                      same Redis, under the run's own prefix), which indexes
"""

from __future__ import annotations

import sys

from common import offline_env

offline_env()

from agent_memory_server.config import MODEL_CONFIGS, ModelConfig, ModelProvider, settings  # noqa: E402

MODEL_CONFIGS[settings.embedding_model] = ModelConfig(
    provider=ModelProvider.OTHER, name=settings.embedding_model, max_tokens=256, embedding_dimensions=384
)

import uvicorn  # noqa: E402
from agent_memory_server.main import app  # noqa: E402

if __name__ == "__main__":
    if sys.argv[1] == "worker":
        from agent_memory_server.cli import cli

        cli(["task-worker"], standalone_mode=True)
    else:
        uvicorn.run(
            app, host="127.0.0.1", port=int(sys.argv[1]), reload=False, log_level="warning", access_log=False
        )
