"""Wire formats: msgspec Structs and codecs for what travels over HTTP. No I/O, no trio."""
