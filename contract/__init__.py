"""revivify.contract: the trace contract as code (``events``: the typed event records the
writer in ``revivify.impl`` uses and the reader in ``revivify.checker`` decodes into;
``schema``: ``traces/schema.json`` generated from them). Imports neither spec, checker nor
impl."""
