"""The shipped hardware profiles (the ``*.yaml`` files next to this one).

This folder is installed as the package ``colls.profiles`` (see ``pyproject.toml``), so
``colls.inputs.hardware`` finds the profiles with :mod:`importlib.resources` both in a checkout and in an
installed wheel. Edit the YAML files here; there is no other copy.
"""
