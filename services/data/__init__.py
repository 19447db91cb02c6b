"""Data sets: standard-format readers, train/valid/test and vertical splits, synthetic data."""

from services.data.ciaodvd import load_ciaodvd, read_ciaodvd_ratings, read_ciaodvd_trust
from services.data.csv import read_csv_links, read_csv_ratings, write_links_csv, write_ratings_csv
from services.data.filmtrust import load_filmtrust, read_filmtrust_ratings, read_filmtrust_trust
from services.data.movielens import load_ml1m, load_ml100k, read_ml1m_ratings, read_ml100k_ratings
from services.data.parsing import DataFormatError, concat_ratings, empty_ratings
from services.data.social import SOCIAL_FORMATS, detect_social_format, load_social
from services.data.splits import (
    dataset_items,
    dataset_users,
    party_index,
    random_split,
    split_by_party,
    vertical_split,
    vertical_split_dataset,
    with_validation,
)
from services.data.synthetic import generate, oracle_predict
from services.data.tastes import generate_tastes
from services.data.types import Dataset, Ratings, SocialLinks

__all__ = [
    "SOCIAL_FORMATS",
    "DataFormatError",
    "Dataset",
    "Ratings",
    "SocialLinks",
    "concat_ratings",
    "dataset_items",
    "dataset_users",
    "detect_social_format",
    "empty_ratings",
    "generate",
    "generate_tastes",
    "load_ciaodvd",
    "load_filmtrust",
    "load_ml1m",
    "load_ml100k",
    "load_social",
    "oracle_predict",
    "party_index",
    "random_split",
    "read_ciaodvd_ratings",
    "read_ciaodvd_trust",
    "read_csv_links",
    "read_csv_ratings",
    "read_filmtrust_ratings",
    "read_filmtrust_trust",
    "read_ml1m_ratings",
    "read_ml100k_ratings",
    "split_by_party",
    "vertical_split",
    "vertical_split_dataset",
    "with_validation",
    "write_links_csv",
    "write_ratings_csv",
]
