"""Getting a model's weights into the form the worker loads: conversion
and quantization through mlx-lm's and mlx-vlm's own converters
(:mod:`worker.loading.convert`, run as ``python -m worker.loading.convert``
by ``mlxd convert``)."""
