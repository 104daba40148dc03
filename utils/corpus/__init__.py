"""Raw text to the generator's input: dumps, folders and files of documents read as documents,
their sentences, and shards (docs/DATA.md, "From raw text")."""
