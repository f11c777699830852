# A coordinator node. Build: docker build -t coordinator .
# The image holds the node only; `coordinator audit` needs the audit extra (PySpark, pandas,
# matplotlib and a Java runtime): docker build --build-arg EXTRAS=audit -t coordinator:audit .
#
# Secure by default: Kafka clients connect over SASL_SSL on 9093 (SCRAM users, the ACL
# authorizer, super user User:admin); the PLAINTEXT listener is the container's loopback only.
# On the first start the entrypoint makes a private CA and a server certificate in
# /data/certs (`coordinator certs generate`; add names with CERT_HOSTNAMES=a,b) and, unless
# COORD_ADMIN_TOKEN is given, a random admin token in /data/admin-token (0600). Then:
#   docker run -d --name coord -p 9093:9093 -p 127.0.0.1:8080:8080 -v coord-data:/data coordinator
#   docker exec -it coord coordinator users set admin --mechanism SCRAM-SHA-512   # prompts
#   docker cp coord:/data/certs/ca.pem .          # what clients trust (ssl.ca.location)
#   docker exec coord cat /data/admin-token       # the admin API's bearer token
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY app ./app
COPY storage ./storage
COPY api ./api
COPY migrations ./migrations
COPY cli ./cli
COPY pipeline ./pipeline
# extras of pyproject.toml, comma-separated; Spark needs a Java runtime
ARG EXTRAS=
RUN set -e; \
    case ",$EXTRAS," in *,audit,*) \
      apt-get update; \
      apt-get install -y --no-install-recommends default-jre-headless; \
      rm -rf /var/lib/apt/lists/*;; \
    esac; \
    pip install --no-cache-dir ".${EXTRAS:+[$EXTRAS]}"
# the entrypoint: first-start certificates and token, then `coordinator "$@"`
RUN printf '%s\n' \
    '#!/bin/sh' \
    'set -e' \
    'if [ "${1:-serve}" = "serve" ]; then' \
    '  data="${DATA_DIR:-/data}"' \
    '  mkdir -p "$data" && chmod 700 "$data"' \
    '  if [ -n "$COORD_SSL_CERTFILE" ] && [ ! -f "$COORD_SSL_CERTFILE" ]; then' \
    '    names="--hostname ${HOSTNAME:-localhost}"' \
    '    for h in $(echo "${CERT_HOSTNAMES:-}" | tr "," " "); do names="$names --hostname $h"; done' \
    '    coordinator certs generate --dir "$(dirname "$COORD_SSL_CERTFILE")" $names' \
    '  fi' \
    '  if [ -z "$COORD_ADMIN_TOKEN" ]; then' \
    '    if [ ! -s "$data/admin-token" ]; then' \
    '      (umask 077 && python -c "import secrets; print(secrets.token_hex(32))" > "$data/admin-token")' \
    '      echo "coordinator: made an admin token in $data/admin-token" >&2' \
    '    fi' \
    '    COORD_ADMIN_TOKEN="$(cat "$data/admin-token")"' \
    '    export COORD_ADMIN_TOKEN' \
    '  fi' \
    'fi' \
    'exec coordinator "$@"' \
    > /usr/local/bin/coordinator-entrypoint \
 && chmod 755 /usr/local/bin/coordinator-entrypoint
ENV COORD_DATABASE_URL=sqlite+aiosqlite:////data/coordinator.db \
    COORD_LISTENERS=SASL_SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092 \
    COORD_ADVERTISED_LISTENERS=SASL_SSL://localhost:9093,PLAINTEXT://127.0.0.1:9092 \
    COORD_SSL_CERTFILE=/data/certs/server.pem \
    COORD_SSL_KEYFILE=/data/certs/server-key.pem \
    COORD_SASL_ENABLED_MECHANISMS=SCRAM-SHA-256,SCRAM-SHA-512 \
    COORD_AUTHORIZER=acl \
    COORD_SUPER_USERS=User:admin \
    COORD_ADMIN_LISTEN=0.0.0.0:8080
VOLUME /data
EXPOSE 9093 8080
HEALTHCHECK --interval=5s --timeout=2s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)" || exit 1
ENTRYPOINT ["coordinator-entrypoint"]
CMD ["serve"]
