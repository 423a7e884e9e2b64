"""Generated coordinator record codecs: see protocol/codegen.py."""
