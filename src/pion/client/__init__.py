"""pion.client"""
