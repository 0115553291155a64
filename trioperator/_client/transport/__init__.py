"""The HTTP/1.1 client on trio streams: the one transport behind ``_client/http.py``'s sessions.

Why not a general-purpose HTTP library: under trio, httpx2 spends about three times the CPU
per small request (pool bookkeeping, layers of async generators, TLS wrappers), more than the
operator's own logic; ``benchmarks/bench_http.py`` measures both. This package does only what
talking to one API server needs: one origin (directly, or through an HTTP(S) proxy), keep-alive
connections in a LIFO list, requests with a fully known body, responses read whole or streamed.
Nothing here writes or reads HTTP by hand. Its modules, by what they do:

- ``pool.py``: keep-alive connections to one origin (``TransportPool``), opening them
  (directly, through a proxy, with TLS), and the responses handed out (``TransportResponse``);
- ``origins.py``: where the connections go (``Origin``, ``Proxy``);
- ``tunnels.py``: ``CONNECT`` tunnels through proxies;
- ``connections.py``: one connection: reading into a response, staleness, closing;
- ``requests.py``: writing requests, validated by h11 (the only module that imports h11);
- ``responses.py``: parsing responses with httptools (the only module that imports it);
- ``decoding.py``: gzip/deflate bodies inflated in bounded pieces;
- ``tls_stream.py``: TLS on a socket of its own (``TLSStream``); TLS inside a TLS proxy's
  tunnel, where there is no socket of its own, is ``trio.SSLStream``'s.

Design rules (each one a lesson of the library it replaces):

- A connection goes back to the pool only after a complete request/response cycle. Anything
  else (an error, a cancellation, a body abandoned half-read) closes it: the next request
  must never read the leftovers of a previous one.
- A kept-alive connection that the server has closed (or that is readable at all while idle,
  which for HTTP/1.1 can only mean EOF or a TLS close alert) is dropped *before* the request
  is written to it, and another one is taken. A request that was written is never repeated
  here: it may have reached the server; retrying is the API client's decision.
- Failures without an HTTP response come out as ``APIConnectionError`` or ``APITimeoutError``
  whose message starts with the request (method and URL); a response that breaks the protocol
  (or a request h11 refuses to send) as ``APIProtocolError``, which is not retried.
- Every response is untrusted input (the server, or any proxy on the way, may be hostile or
  broken), and nothing it sends may grow the operator's memory or CPU without bound: a head
  (status line and headers, 1xx heads included) or trailers of more than ``MAX_HEAD_BYTES``,
  more than ``MAX_HEADERS`` headers, a body over the caller's ``max_size`` (as sent, or once
  decompressed) all end the exchange with ``APIResponseTooLargeError`` as soon as they are
  seen, without reading the rest. The bytes are counted per read, never per byte.
"""
