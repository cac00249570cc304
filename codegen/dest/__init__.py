"""One generator per output: IR in, {path: text} out (see codegen.gen)."""
