-- One PostgreSQL server, one database per service (run once, on first start of the volume).
CREATE DATABASE coordinator;
CREATE DATABASE party_a;
CREATE DATABASE party_b;
CREATE DATABASE party_c;
