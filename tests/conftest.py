pytest_plugins = ["tests.support.s3"]
