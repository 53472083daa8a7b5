"""Shared fixtures for kiwi's Python tests: small models that run a training step in milliseconds."""
import pytest

try:
    import torch
    import torch.nn as nn
except ImportError:  # the kiwi.torch tests skip themselves; the core tests still run
    torch = None
    nn = None

if torch is not None:
    # oneDNN's convolution backward keeps a per-thread weight-gradient scratch whose size depends on the
    # thread count (torch 2.13: +29,952 bytes for a 16-channel 3x3 convolution on 2 threads); kiwi's
    # analytic workspaces are those of one intra-op thread, and the exact-memory tests run on one.
    torch.set_num_threads(1)

if torch is None:
    collect_ignore = ["test_torch_capture.py", "test_torch_apply.py", "test_torch_step.py"]


if torch is not None:
    class SmallCnn(nn.Module):
        """conv-bn-relu, a residual block, max pooling, dropout and a linear head: the ops of VGG/ResNet."""

        def __init__(self, channels: int = 8, classes: int = 10, size: int = 32):
            super().__init__()
            self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(channels)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(channels)
            self.pool = nn.MaxPool2d(2)
            self.drop = nn.Dropout(0.5)
            self.fc = nn.Linear(channels * (size // 2) ** 2, classes)

        def forward(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            z = self.bn2(self.conv2(y))
            z += y
            z = self.pool(self.relu(z))
            return self.fc(self.drop(torch.flatten(z, 1)))


    class TinyTransformer(nn.Module):
        """Embedding, layernorm, one attention head (matmul, transpose, softmax), GELU MLP, mean pooling."""

        def __init__(self, vocab: int = 50, dim: int = 16, classes: int = 5):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.norm = nn.LayerNorm(dim)
            self.q = nn.Linear(dim, dim)
            self.k = nn.Linear(dim, dim)
            self.v = nn.Linear(dim, dim)
            self.fc1 = nn.Linear(dim, 4 * dim)
            self.fc2 = nn.Linear(4 * dim, dim)
            self.head = nn.Linear(dim, classes)

        def forward(self, ids):
            x = self.embed(ids)
            h = self.norm(x)
            scores = torch.matmul(self.q(h), self.k(h).transpose(1, 2)) * 0.25
            x = x + torch.matmul(torch.softmax(scores, dim=-1), self.v(h))
            x = x + self.fc2(nn.functional.gelu(self.fc1(x)))
            return self.head(x.mean(dim=1))


    @pytest.fixture
    def cnn():
        torch.manual_seed(0)
        model = SmallCnn().train()
        x = torch.randn(8, 3, 32, 32)
        y = torch.randint(0, 10, (8,))
        return model, x, y


    @pytest.fixture
    def transformer():
        torch.manual_seed(0)
        model = TinyTransformer().train()
        ids = torch.randint(0, 50, (3, 7))
        y = torch.randint(0, 5, (3,))
        return model, ids, y
