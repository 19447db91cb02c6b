"""P4GCN (protocol `social-gnn`): a rating party trains with noisy products of a social party's graph.

Modules, each importing only the ones listed before it (and services.crypto, .data, .db, .protocol):
  graph     adjacency over the aligned users, L_sym, its batch factors and public l1 bound
  keys      the rating party's PaillierSession, the key-size check, key files
  engines   where X lives at the social party: PlainEngine, PaillierEngine (sandwich products)
  party     SocialParty: validation, DP noise and accounting, the engine's products (graph, engines, keys)
  ledger    the social graph's lifetime (ε, δ) ledger in the party database
  service   SocialService: the API's sessions over stored links (graph, ledger, party)
  backends  the rating party's side: SocialProductBackend, in-process plain and encrypted backends
            over a byte-level SocialTransport (engines, keys, party)
  client    SocialClient: the HTTP SocialTransport, owner of the /v1/social session URL paths
  http      HttpSocialBackend: the encrypted backend over SocialClient (backends, client, keys)
  trainer   the rating party's training loop (backends, graph; models.p4gcn)
  fusion    the social summary released once under the whole budget and the validated fusion (trainer)
The wire messages stay in services.protocol.social (both parties and the API import them).
"""
