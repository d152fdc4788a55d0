"""Metadata lives in setup.cfg; this file lets older pip versions install in editable mode.

It also builds the optional compiled host-plane reader (``tfdevices.verify._hostwalk``): where no
compiler is found the package installs without it and reads profiles in Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("tfdevices.verify._hostwalk", ["tfdevices/verify/_hostwalk.c"], optional=True)],
)
