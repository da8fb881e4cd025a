"""RESP2/RESP3 wire codec: request parsing and reply encoding. A leaf: imports no other pion package."""
