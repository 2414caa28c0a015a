"""tidemark's long-running services: the cleaner and the archiver. They only wire the shared
library (``tidemark``) to Kafka, HTTP and Prometheus; every decision is the library's."""
