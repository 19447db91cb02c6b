#!/bin/sh
# Usage: docker-entrypoint.sh party|coordinator [extra serve options]
# Runs the service's migrations, then replaces itself with the server (PID 1 gets the signals).
set -eu

service="${1:-}"
case "$service" in
  party|coordinator) shift ;;
  *)
    echo "usage: docker-entrypoint.sh party|coordinator [serve options]" >&2
    exit 64
    ;;
esac

cd "${APP_DIR:-/app}"
# The environments read PARTY_DATABASE_URL / COORD_DATABASE_URL; same command as the README.
echo "migrating the $service database ..." >&2
alembic -n "$service" upgrade head

echo "starting the $service service on ${HOST:-0.0.0.0}:${PORT:-8000}" >&2
exec fedrec "$service" serve --host "${HOST:-0.0.0.0}" --port "${PORT:-8000}" "$@"
