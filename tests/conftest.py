import os

# Every Spark JVM the tests start (the shared session's and each child process's) compiles with
# C1 only and one GC thread: a test's queries are small, and C2's compiler threads only took the
# two cores' time (a child's `tidemark write` about 25 % faster, measured). Semantics are the
# JVM's either way; production keeps its defaults, and the scale test (tests/spark/
# test_beyond_the_driver.py) runs without this.
os.environ.setdefault(
    "PYSPARK_SUBMIT_ARGS", "--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' pyspark-shell"
)

pytest_plugins = ["tests.support.s3", "tests.support.kafka", "tests.support.spark"]
