"""Python kernels of the example op library (dispatch values `runtime.kernels.<module>:<function>`
in schemas/python.yaml). Each function takes the op's arguments, as the dispatcher passes them."""
