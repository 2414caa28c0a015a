pytest_plugins = ["tests.support.s3", "tests.support.kafka", "tests.support.spark"]
