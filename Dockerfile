# The tidemark services (cleaner, archiver) as one image; the first argument picks the service:
#   docker run tidemark cleaner --bootstrap kafka:9092 --s3-endpoint http://minio:9000
# Used by docker-compose.yml and the Helm chart in charts/tidemark.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# the library and the services with their S3 and Kafka/Prometheus extras; no dev tools, no Spark
COPY pyproject.toml README.md /tmp/tidemark/
COPY libs /tmp/tidemark/libs
COPY services /tmp/tidemark/services
RUN pip install '/tmp/tidemark[s3,services]' && rm -rf /tmp/tidemark

RUN groupadd --system --gid 10001 tidemark \
    && useradd --system --uid 10001 --gid tidemark --no-create-home --home-dir /nonexistent tidemark
USER 10001:10001

# /metrics and /healthz must be reachable from outside the container (probes, scrapes)
ENV TIDEMARK_METRICS_HOST=0.0.0.0
EXPOSE 9400

ENTRYPOINT ["/bin/sh", "-c", "case \"$0\" in cleaner|archiver) exec \"tidemark-$0\" \"$@\" ;; *) echo \"usage: cleaner|archiver [options]\" >&2; exit 64 ;; esac"]
CMD ["cleaner", "--help"]
