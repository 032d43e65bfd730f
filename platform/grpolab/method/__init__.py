"""The method as data: the axes of an update rule (spec), the registry of named, cited methods,
each axis value's requirement (when it can act), and the methods table generated from the registry."""
