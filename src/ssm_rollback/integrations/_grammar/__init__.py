"""Grammar internals behind ``ssm_rollback.integrations.grammar``.

``matchers`` (the ``GrammarMatcher`` protocol and the xgrammar and
llguidance adapters), ``bitmask`` (token bitmasks), ``byte_tokenizer`` (a
byte-level tokenizer for tests and the demo), ``rollback`` (the model +
matcher rollback transaction) and ``step`` (grammar masks in a decode step).
"""
