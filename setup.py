"""Only the C extension lives here; everything else about the package is in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("host.transport._rxlane", ["host/transport/_rxlane.c"],
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"])])
