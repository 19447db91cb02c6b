# One image for both services: `docker run IMAGE party` or `docker run IMAGE coordinator`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# torch first, pinned, from the CPU-only index: never pulls the multi-GB CUDA wheels.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

# Dependencies change less often than code: install them in their own layer from pyproject.toml.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
print('\n'.join(d for d in deps if not d.startswith('torch')))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

COPY services ./services
COPY models ./models
COPY api_common ./api_common
COPY party_api ./party_api
COPY coordinator_api ./coordinator_api
COPY cli ./cli
COPY migrations ./migrations
COPY alembic.ini docker-entrypoint.sh ./
# Editable install keeps /app/migrations next to the code, where the migration helpers look for it.
RUN pip install --no-deps -e . \
    && chmod +x /app/docker-entrypoint.sh \
    && useradd --create-home --uid 10001 fedrec \
    && mkdir -p /data && chown fedrec /data

USER fedrec
ENV PARTY_DATA_DIR=/data COORD_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=5 \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4).status != 200)"

ENTRYPOINT ["/app/docker-entrypoint.sh"]
CMD ["party"]
