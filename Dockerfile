# The tidemark services (cleaner, archiver, writer-coordinator) and the operator as one image; the
# first argument picks the process (the chart runs `tidemark-operator` and `tidemark` directly):
#   docker run tidemark cleaner --bootstrap kafka:9092 --s3-endpoint http://minio:9000
#   docker run -p 9500:9500 -v "$PWD/token:/run/token:ro" tidemark writer-coordinator --bootstrap kafka:9092 \
#       --s3-endpoint http://minio:9000 --conf tidemark.writer.coordinator.token.file=/run/token
# Used by docker-compose.yml and the Helm chart in charts/tidemark.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# the library, the services and the operator with their S3, Kafka/Prometheus and kopf extras; no
# dev tools, no Spark (the operator's compaction Jobs run `tidemark compact`, which needs none)
COPY pyproject.toml README.md /tmp/tidemark/
COPY libs /tmp/tidemark/libs
COPY services /tmp/tidemark/services
COPY operator /tmp/tidemark/operator
RUN pip install '/tmp/tidemark[s3,services,operator]' && rm -rf /tmp/tidemark

RUN groupadd --system --gid 10001 tidemark \
    && useradd --system --uid 10001 --gid tidemark --no-create-home --home-dir /nonexistent tidemark
USER 10001:10001

# /metrics and /healthz (9400), and the writer-coordinator's marker API (9500), must be reachable
# from outside the container: probes, scrapes, Spark writers
ENV TIDEMARK_METRICS_HOST=0.0.0.0 \
    TIDEMARK_COORDINATOR_HOST=0.0.0.0
EXPOSE 9400 9500

ENTRYPOINT ["/bin/sh", "-c", "case \"$0\" in cleaner|archiver|writer-coordinator|operator) exec \"tidemark-$0\" \"$@\" ;; *) echo \"usage: cleaner|archiver|writer-coordinator|operator [options]\" >&2; exit 64 ;; esac"]
CMD ["cleaner", "--help"]
