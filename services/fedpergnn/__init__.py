"""FedPerGNN-style graph expansion (Wu et al. 2022) in the vertical setting: the baseline VerFedGNN is measured against.

Parties exchange their items' individual embeddings through a third-party relay (item ids under
keyed pseudonyms), train the shared GNN on the expanded graph, and upload public-parameter
gradients with local differential privacy (clip δ, Laplace λ) and pseudo-interacted rows.
"""
