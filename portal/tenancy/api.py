"""`GET /api/v1/me/`: who the caller is, as the API sees them (what `wanka login` checks)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.tenancy.models import ApiToken, membership_of


class TokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["name", "hint", "scope", "expires_at"]


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    tenant = serializers.CharField(allow_null=True)
    role = serializers.CharField(allow_null=True)
    operator = serializers.BooleanField()
    token = TokenSerializer(allow_null=True, help_text="The token of this request, if any")


class MeView(APIView):
    @extend_schema(responses=MeSerializer)
    def get(self, request):
        membership = membership_of(request.user)
        token = request.auth if isinstance(request.auth, ApiToken) else None
        me = {
            "username": request.user.get_username(),
            "tenant": membership.tenant.name if membership else None,
            "role": membership.role if membership else None,
            "operator": request.user.is_staff and membership is None,
            "token": token,
        }
        return Response(MeSerializer(me).data)
