"""The ordered merge of flushed generations into the base table: plan, execute, commit."""
